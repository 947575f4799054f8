// runtime/cli/train_config.h — every setting of a run: TrainConfig. Every field has a
// default and a one-line comment. The command line fills it through one table of flags
// (runtime/cli/flag_table.cpp: each flag's name, help, field and checks), and check_flag_rules()
// there reports every problem at once, with the numbers, naming the flag.
//
// It is the runtime's, not the step's: the step reads the model's shape (LlamaConfig,
// picotron/config.h) and a learning-rate schedule, and each technique a settings struct
// of what it reads, all built from this in one place (runtime/cli/settings.h).
//
// This file includes no LibTorch header: it compiles in a second and is tested alone.
//
// Test: build/tests/unit_tests "[config]"   (or ctest -L unit)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "picotron/config.h"

namespace picotron {

struct TrainConfig {
  // --- model ---
  std::string model = "tiny";          // preset name (--model)
  LlamaConfig llama;                   // preset, then --hidden-size etc. overrides
  std::vector<std::string> shape_flags;  // the model flags given on the command line ("model", "hidden-size", ...)
  std::string init_from;               // a Hugging Face LLaMA folder: its config.json and weights (runtime/checkpoint/hf.h)
  // --- hardware and numerics ---
  std::string device = "auto";         // cpu | cuda | auto (cuda when a GPU is present)
  Precision dtype = Precision::kFP32;  // compute dtype; --dtype defaults to bf16 on cuda, fp32 on cpu
  bool dtype_given = false;            // whether --dtype was on the command line
  bool fp8 = false;                    // the projections' GEMMs in fp8 (kernels/fp8.h); --dtype fp8 = bf16 + this
  bool seq_len_given = false;          // whether --seq-len was (--plan then plans for 4096, not the CPU demo's 128)
  int threads = 0;                     // CPU intra-op threads per rank (0: cores / ranks on this node)
  // --- batch and schedule ---
  int64_t seq_len = 128;               // S: tokens per sequence
  int64_t micro_batch_size = 16;       // B: sequences per micro-batch per data-parallel rank
  int64_t grad_acc_steps = 1;          // micro-batches accumulated per optimizer step
  int64_t steps = 1000;                // optimizer steps
  double lr = 3e-3;                    // peak learning rate
  int64_t warmup_steps = 50;           // linear warmup from 0 to --lr (flag default: 5% of --steps)
  double min_lr = 3e-4;                // cosine decays from --lr to this at the last step
  double weight_decay = 0.1;           // AdamW decoupled weight decay (not on norms)
  double beta1 = 0.9;                  // AdamW first-moment decay
  double beta2 = 0.95;                 // AdamW second-moment decay
  double adam_eps = 1e-8;              // AdamW epsilon
  double grad_clip = 1.0;              // global grad-norm clipping threshold (0: off)
  int max_bad_steps = 3;               // stop (exit 3) after this many steps with a non-finite loss or grad
                                       //   norm (fp16 overflows with a finite loss do not count)
  double init_std = 0.02;              // std of the normal init of weight matrices
  uint64_t seed = 1234;                // seed of init and data order
  // --- data ---
  std::string data = "arithmetic";     // arithmetic | synthetic | text file | token .bin file or dir
  std::string val_data;                // held-out tokens (same forms as data): validation loss (empty: none)
  int64_t eval_every = 0;              // --val-data: the validation loss every N steps and at the end (0: at the end)
  int64_t eval_batches = 4;            // --val-data: the same K global batches each time
  // --- parallelism ---
  int dp = 1, tp = 1, pp = 1, cp = 1;  // mesh sizes; dp*pp*cp*tp must equal the world size
  int ep = 1;                          // expert parallelism: each MoE layer's experts over ep ranks of dp (divides dp)
  bool sp = false;                     // sequence parallelism: activations between blocks split along S over tp
  std::string pp_schedule = "1f1b";    // afab | 1f1b | interleaved | zb-h1 | dualpipev (pipeline_parallel/schedules.h)
  int pp_virtual_stages = 1;           // model chunks per pp rank (interleaved: >= 2)
  std::string pp_trace;                // write a Chrome trace of every pipeline action here (empty: none)
  std::string kernels = "auto";        // auto | aten | fused: fused CUDA kernels (kernels/README.md); auto = fused on CUDA
  std::string attention = "sdpa";      // --kernels fused: the attention core: sdpa (ATen's fastest, flash/cuDNN) |
                                       //   naive | flash-wmma | flash-mma (the hand-written ladder, kernels/)
  std::string recompute = "none";      // none | selective | full: activations recomputed in backward (picotron/recompute.h)
  std::string cp_layout = "zigzag";    // contiguous | zigzag: which tokens each cp rank holds (context_parallel/)
  std::string cp_mode = "ring";        // ring | ulysses | hybrid: how attention meets the other cp ranks' tokens
  int cp_ulysses = 0;                  // --cp-mode hybrid: the all-to-all group size U (cp/U ranks form each ring)
  int zero = 0;                        // ZeRO stage over cp x dp: 0 (plain data parallelism) | 1 (optimizer state
                                       //   sharded) | 2 (gradients too) | 3 (parameters too)
  bool zero_offload = false;           // ZeRO's master weights + moments in pinned CPU memory, AdamW on the CPU
  int zero_shard = 0;                  // HSDP: ZeRO's slices over groups of this many consecutive dp ranks (x cp),
                                       //   replicated across them (0: the whole cp x dp group; zero/zero_groups.h)
  int zero_hpz = 0;                    // hpZ, --zero 3: after forward each unit kept over this many dp ranks (0: none)
  DpMode dp_mode = DpMode::kBucketed;  // naive (all-reduce after backward) | bucketed (overlapped)
  double dp_bucket_mb = 25.0;          // bucket size for bucketed data parallelism, in MiB
  int timeout_s = 300;                 // a collective waiting longer than this aborts the job
  std::string flight_recorder;         // DIR for every rank's last communications, comms-rank<R>.json, written on a
                                       //   timeout, signal or error ("": <--save-dir>/flight, else flight/; "off": none)
  int64_t flight_entries = 4096;       // how many communications each rank's flight recorder keeps
  bool flight_dump_at_end = false;     // write the flight recorder's files at the end of a run that went well too
  // --- output ---
  std::string run_dir;                 // every output under this folder, fixed names (runtime/preflight/run_dir.h; empty: none)
  std::string command_line;            // --run-dir: the command as given, for DIR/command.txt (main fills it; not a flag)
  std::string metrics_file;            // one JSON object per step (empty: none)
  std::string memory_trace;            // one JSON object per phase of each step: tensor memory (empty: none)
  std::string profile;                 // --profile DIR: the LibTorch profiler's trace per rank + a top-operator table
  int64_t profile_first = 0;           // --profile-steps A:B, the steps recorded (0: two steps after warm-up)
  int64_t profile_last = 0;
  std::string save_params;             // write final full parameters here, safetensors (empty: none)
  std::string export_hf;               // write a Hugging Face folder (config.json + model.safetensors) here
  std::string eval;                    // a JSON file {"input_ids": [[...], ...]}: print the loss on it at the end
  std::string eval_logits;             // with --eval: write {"loss", "logits"} to this JSON file
  std::vector<int64_t> prompt_ids;     // continue these token ids by --generate tokens (greedy) at the end
  std::string tokenizer;               // a folder holding tokenizer.json (or the file): samples and --prompt as text
  std::string prompt;                  // --tokenizer: continue this text by --generate tokens (greedy) at the end
  // --- checkpoints (runtime/checkpoint/resume.h) ---
  std::string save_dir;                // write checkpoints here, D/step-000120/ (empty: none)
  int64_t save_every = 0;              // a checkpoint every N steps (0: only at the end of the run)
  int keep_checkpoints = 2;            // keep the newest K checkpoints in --save-dir
  std::string resume;                  // continue from D (its newest checkpoint) or D/step-000120
  std::string check_checkpoint;        // verify this checkpoint (or D's newest), print what it holds, exit
  bool async_save = false;             // copy the state to host memory, write it in the background
  int64_t stop_at_step = 0;            // stop after this step (0: --steps); the schedule still follows --steps
  int log_every = 0;                   // print a line every N steps (0: every step up to 50 steps,
                                       //   else about 50 lines; always the first and last)
  bool comm_report = false;            // print the communication ledger (per group and kind) at the end
  std::string wait_for_debugger = "none";  // none | all | a rank: it waits for a debugger to attach (docs/stepping.md)
  bool explain = false;                // narrate the first step rank by rank (runtime/observe/explain.h)
  int generate = 4;                    // samples printed after training (0: none)
  bool dry_run = false;                // print the model summary and exit
};

}  // namespace picotron
