// runtime/cli/flag_table.cpp — every flag of build/train, one row each (flag_row.h says
// how a row is made), group by group: each add_*_flags adds a run of rows, in the order
// --help lists them within their --help group (a run may hold rows of several groups:
// --pp-trace is "Learning" among the parallelism flags). To add a flag: a field with its default in
// runtime/cli/train_config.h, one row here; a rule between flags goes into
// check_flag_rules() (flag_rules.cpp).
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "context_parallel/cp_layout.h"  // the --cp-layout and --cp-mode names
#include "pipeline_parallel/schedules.h"  // the --pp-schedule names
#include "runtime/cli/flag_row.h"
#include "runtime/cli/train_config.h"

namespace picotron::flag_row {
namespace {

// The planner's group (--plan: runtime/planner/layout_search.h). The defaults describe one H100
// SXM node: NVLink 4 moves 450 GB/s per direction per GPU (NCCL's bus bandwidth on a node
// comes close to it), InfiniBand NDR one 400 Gb/s = 50 GB/s port per GPU.
void add_planner_flags(std::vector<Flag>& t) {
  const std::string g = "Planner";
  t.push_back(on_off("plan", g, "search the layouts (dp, tp, pp, cp, sp, ZeRO, recompute, schedule, micro-batch) for --gpus GPUs: print how many were considered and fit, the best --plan-top by predicted tokens/s per GPU with their command lines, and exit (nothing launched or allocated)", of(&LayoutSearchSettings::search)));
  t.push_back(integer("gpus", g, "GPUs to plan for", of(&LayoutSearchSettings::gpus), {">=", 1, double(1 << 16)}));
  t.push_back(integer("gpus-per-node", g, "GPUs per node (joined by the intra-node links)", of(&LayoutSearchSettings::gpus_per_node), {">=", 1, double(1 << 10)}));
  t.push_back(real("gpu-memory", g, "memory per GPU in GB (10^9 bytes); leave room for the CUDA context and NCCL (an H100 has 85.5 GB)", of(&LayoutSearchSettings::gpu_memory_gb), {">", 0, 1e6}));
  t.push_back(integer("global-batch-tokens", g, "tokens per optimizer step to reach: micro-batch x grad-acc x dp x seq-len (the smallest not below)", of(&LayoutSearchSettings::global_batch_tokens), {">", 0, double(int64_t(1) << 40)}));
  t.push_back(real("intra-node-gbps", g, "GB/s per GPU per direction inside a node (H100 NVLink 4: 450)", of(&LayoutSearchSettings::intra_node_gbps), {">", 0, 1e6}));
  t.push_back(real("inter-node-gbps", g, "GB/s per GPU per direction between nodes (InfiniBand NDR 400 Gb/s: 50)", of(&LayoutSearchSettings::inter_node_gbps), {">", 0, 1e6}));
  t.push_back(real("peak-tflops", g, "dense peak TFLOP/s of one GPU in the compute dtype (H100 SXM bf16: 989)", of(&LayoutSearchSettings::peak_tflops), {">", 0, 1e6}));
  t.push_back(integer("plan-top", g, "layouts --plan prints, best first", of(&LayoutSearchSettings::top), {">=", 1, 1000}));
  // The run's own layout instead of a search: the flags are checked as the run's, so launch
  // it as the run (mpirun -np dp x tp x pp x cp); nothing is allocated or sent.
  Flag layout = on_off("plan-layout", g, "print --plan's prediction for this run's own layout (--dp, --tp, --pp, --cp, --sp, --zero, --recompute, --pp-schedule, --micro-batch-size, --grad-acc-steps): each pipeline stage's peak memory and the step time split, and exit (launch it as the run: the mesh is checked against the ranks)", of(&LayoutSearchSettings::layout_only));
  layout.set = [](RunConfig& c, const std::string& t) {
    c.planner.layout_only = to_bool("plan-layout", t);
    c.planner.search = c.planner.search || c.planner.layout_only;
  };
  t.push_back(layout);
}

// The model: a preset, its shapes overridden one by one, or a Hugging Face folder.
void add_model_flags(std::vector<Flag>& t) {
  const int64_t k = 1;  // (k << n): 2^n, the bounds below
  std::string presets;
  for (const auto& name : preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  Flag model = text("model", "Model", "preset: " + presets, of(&TrainConfig::model));
  model.set = [](RunConfig& c, const std::string& name) {
    c.llama = preset(name);  // throws naming --model and the known presets
    c.model = name;
  };
  t.push_back(model);
  t.push_back(preset_override(integer("hidden-size", "Model", "override hidden_size (H)", of(&LlamaConfig::hidden_size), {">", 0, double(k << 16)})));
  t.push_back(preset_override(integer("intermediate-size", "Model", "override intermediate_size (I)", of(&LlamaConfig::intermediate_size), {">", 0, double(k << 20)})));
  t.push_back(preset_override(integer("num-hidden-layers", "Model", "override num_hidden_layers (L)", of(&LlamaConfig::num_hidden_layers), {">", 0, double(k << 10)})));
  t.push_back(preset_override(integer("num-attention-heads", "Model", "override num_attention_heads (nH)", of(&LlamaConfig::num_attention_heads), {">", 0, double(k << 12)})));
  t.push_back(preset_override(integer("num-key-value-heads", "Model", "override num_key_value_heads (nKV)", of(&LlamaConfig::num_key_value_heads), {">", 0, double(k << 12)})));
  t.push_back(preset_override(integer("vocab-size", "Model", "override vocab_size (V)", of(&LlamaConfig::vocab_size), {">", 0, double(k << 24)})));
  t.push_back(preset_override(real("rope-theta", "Model", "override rope_theta", of(&LlamaConfig::rope_theta), {">", 0, kNoLimit})));
  t.push_back(preset_override(integer("max-position-embeddings", "Model", "override max_position_embeddings", of(&LlamaConfig::max_position_embeddings), {">", 0, double(k << 24)})));
  t.push_back(preset_override(real("rms-norm-eps", "Model", "override rms_norm_eps", of(&LlamaConfig::rms_norm_eps), {">", 0, kNoLimit})));
  t.push_back(preset_override(integer("num-local-experts", "Model", "override num_local_experts (E; 0: dense MLPs, else every layer a mixture of E experts, expert_parallel/moe.h)", of(&LlamaConfig::num_local_experts), {">=", 0, double(k << 12)})));
  t.push_back(preset_override(integer("num-experts-per-tok", "Model", "override num_experts_per_tok (k: the experts each token goes to)", of(&LlamaConfig::num_experts_per_tok), {">", 0, double(k << 12)})));
  t.push_back(preset_override(real("router-aux-loss-coef", "Model", "override router_aux_loss_coef (the load-balancing loss's weight; 0: none)", of(&LlamaConfig::router_aux_loss_coef), {">=", 0, kNoLimit})));
  t.push_back(preset_override(on_off("tie-word-embeddings", "Model", "override tie_word_embeddings (--tie-word-embeddings=false unties)", of(&LlamaConfig::tie_word_embeddings))));
  t.push_back(text("init-from", "Model", "start from a Hugging Face LLaMA or Mixtral folder (config.json + model.safetensors, or sharded with model.safetensors.index.json): its shape and weights", of(&TrainConfig::init_from)));
  t.push_back(on_off("dry-run", "Model", "print the model summary (exact parameter count), the plan and the memory estimate, and exit", of(&TrainConfig::dry_run)));
}

// The device, the dtype and fp8, the threads.
void add_hardware_flags(std::vector<Flag>& t) {
  const int64_t k = 1;  // (k << n): 2^n, the bounds below
  t.push_back(choice("device", "Hardware", "cpu | cuda | auto (cuda when a GPU is present)", of(&TrainConfig::device), {"cpu", "cuda", "auto"}));
  Flag dtype{"dtype", "Hardware", "fp32 | fp64 | bf16 | fp16 | fp8 (fp8 = bf16 with --fp8; default: bf16 on cuda, fp32 on cpu)"};
  dtype.shows_default = false;
  dtype.set = [](RunConfig& c, const std::string& name) {
    if (name == "fp8") { c.dtype = Precision::kBF16, c.dtype_given = true, c.fp8 = true; return; }  // the shorthand
    for (Precision p : {Precision::kFP32, Precision::kFP64, Precision::kBF16, Precision::kFP16})
      if (name == precision_name(p)) { c.dtype = p, c.dtype_given = true; return; }
    throw std::invalid_argument("--dtype must be fp32, fp64, bf16, fp16 or fp8, got '" + name + "'");
  };
  dtype.show = [](const RunConfig& c) { return std::string(precision_name(c.dtype)); };
  t.push_back(dtype);
  t.push_back(on_off("fp8", "Hardware", "the projections' GEMMs (q/k/v/o, gate/up/down) take fp8 inputs with per-tensor scales (kernels/fp8.h): e4m3 weights and activations, e5m2 gradients; the rest stays in --dtype (fp64, fp32 or bf16; on the CPU the fp8 casts are emulated)", of(&TrainConfig::fp8)));
  t.push_back(integer("threads", "Hardware", "CPU intra-op threads per rank (0: cores / ranks on this node)", of(&TrainConfig::threads), {">=", 0, double(k << 12)}));
}

// The batch, the schedule, AdamW, the data.
void add_training_flags(std::vector<Flag>& t) {
  const int64_t k = 1;  // (k << n): 2^n, the bounds below
  Flag seq_len = integer("seq-len", "Training", "tokens per sequence (S; --plan without it: 4096)", of(&TrainConfig::seq_len), {">", 0, double(k << 24)});
  seq_len.set = [parse = seq_len.set](RunConfig& c, const std::string& v) { parse(c, v), c.seq_len_given = true; };
  t.push_back(seq_len);
  t.push_back(integer("micro-batch-size", "Training", "sequences per micro-batch per data-parallel rank (B)", of(&TrainConfig::micro_batch_size), {">", 0, double(k << 20)}));
  t.push_back(integer("grad-acc-steps", "Training", "micro-batches accumulated per optimizer step", of(&TrainConfig::grad_acc_steps), {">", 0, double(k << 20)}));
  t.push_back(integer("steps", "Training", "optimizer steps", of(&TrainConfig::steps), {">=", 0, double(k << 40), " (0: no training: --eval, --generate, --export-hf only)"}));
  t.push_back(real("lr", "Training", "peak learning rate", of(&TrainConfig::lr), {">", 0, kNoLimit}));
  Flag warmup = integer("warmup-steps", "Training", "linear warmup steps (default: 5% of --steps)", of(&TrainConfig::warmup_steps), {">=", 0, kNoLimit});
  warmup.shows_default = false;
  t.push_back(warmup);
  Flag min_lr = real("min-lr", "Training", "learning rate at the end of the cosine decay", of(&TrainConfig::min_lr), {">=", 0, kNoLimit});
  min_lr.check = [](const RunConfig& c, Problems& p) {
    if (!std::isfinite(c.min_lr)) p.push_back("--min-lr must be a finite number, got " + value_text(c.min_lr));
    else if (!(c.min_lr >= 0 && c.min_lr <= c.lr)) p.push_back("--min-lr must be in [0, --lr " + value_text(c.lr) + "], got " + value_text(c.min_lr));
  };
  t.push_back(min_lr);
  t.push_back(real("weight-decay", "Training", "AdamW weight decay (not applied to norms)", of(&TrainConfig::weight_decay), {">=", 0, kNoLimit}));
  for (auto [name, field] : {std::pair{"beta1", of(&TrainConfig::beta1)}, {"beta2", of(&TrainConfig::beta2)}}) {
    Flag beta = real(name, "Training", std::string("AdamW ") + name, field, {">=", 0, kNoLimit});
    beta.check = [name = std::string(name), field](const RunConfig& c, Problems& p) {
      const double v = value_of(field, c);
      if (!(v >= 0 && v < 1)) p.push_back("--" + name + " must be in [0, 1), got " + value_text(v));
    };
    t.push_back(beta);
  }
  t.push_back(real("adam-eps", "Training", "AdamW epsilon", of(&TrainConfig::adam_eps), {">", 0, kNoLimit}));
  t.push_back(real("grad-clip", "Training", "clip the global gradient norm to this (0: off)", of(&TrainConfig::grad_clip), {">=", 0, kNoLimit, " (0: off)"}));
  t.push_back(integer("max-bad-steps", "Training", "stop with an error (exit 3) after this many steps with a non-finite loss or gradient norm (fp16 overflow steps with a finite loss do not count)", of(&TrainConfig::max_bad_steps), {">=", 1, kNoLimit}));
  t.push_back(real("init-std", "Training", "std of the normal initialisation of weight matrices (embedding and projections; norms start at 1)", of(&TrainConfig::init_std), {">", 0, kNoLimit}));
  t.push_back(integer("seed", "Training", "seed of initialisation and data order", of(&TrainConfig::seed), {">=", 0, kNoLimit}));
  t.push_back(text("data", "Training", "arithmetic | synthetic | a text file | a token file (.bin) or a directory of them", of(&TrainConfig::data)));
  t.push_back(text("val-data", "Training", "held-out tokens (the forms of --data, e.g. DIR/val from scripts/prepare_data.py): the validation loss in the step line and the metrics", of(&TrainConfig::val_data)));
  t.push_back(integer("eval-every", "Training", "with --val-data: the validation loss every N steps, and after the last (0: after the last only)", of(&TrainConfig::eval_every), {">=", 0, kNoLimit}));
  t.push_back(integer("eval-batches", "Training", "with --val-data: the mean loss over these K global batches of it (the same ones each time)", of(&TrainConfig::eval_batches), {">=", 1, double(k << 20)}));
}

// The mesh and each technique's own flags (and the kernels, recompute).
void add_parallelism_flags(std::vector<Flag>& t) {
  const int64_t k = 1;  // (k << n): 2^n, the bounds below
  t.push_back(integer("dp", "Parallelism", "data-parallel size", of(&TrainConfig::dp), {">=", 1, double(k << 16)}));
  t.push_back(integer("tp", "Parallelism", "tensor-parallel size", of(&TrainConfig::tp), {">=", 1, double(k << 16)}));
  t.push_back(integer("ep", "Parallelism", "expert-parallel size: a mixture of experts' experts split over this many ranks of the data-parallel group (divides --dp; expert_parallel/)", of(&TrainConfig::ep), {">=", 1, double(k << 16)}));
  t.push_back(integer("pp", "Parallelism", "pipeline-parallel size", of(&TrainConfig::pp), {">=", 1, double(k << 16)}));
  Flag schedule = text("pp-schedule", "Parallelism", "pipeline schedule: afab | 1f1b | interleaved | zb-h1 | dualpipev (two chunks per rank in a V: --pp-virtual-stages becomes 2)", of(&TrainConfig::pp_schedule));
  schedule.set = [](RunConfig& c, const std::string& name) {
    const PipelineSchedule s = parse_schedule(name);
    c.pp_schedule = schedule_name(s);
    if (is_v_shape(s)) c.pp_virtual_stages = 2;  // the V: chunks r and 2P-1-r
  };
  t.push_back(schedule);
  t.push_back(integer("pp-virtual-stages", "Parallelism", "model chunks per pipeline rank (--pp-schedule interleaved: >= 2)", of(&TrainConfig::pp_virtual_stages), {">=", 1, double(k << 10)}));
  t.push_back(text("pp-trace", "Learning", "write a Chrome trace (JSON) of every pipeline F/B/W, send and recv on every rank to this file (with --dry-run: the schedule simulated in unit time)", of(&TrainConfig::pp_trace)));
  t.push_back(integer("cp", "Parallelism", "context-parallel size: each sequence split over cp ranks, attention by ring or all-to-all (--cp-mode)", of(&TrainConfig::cp), {">=", 1, double(k << 16)}));
  t.push_back(choice("kernels", "Hardware", "aten (plain ATen ops) | fused (the CUDA kernels of kernels/: RMSNorm, RoPE, SwiGLU, flash attention, linear + cross-entropy, AdamW) | auto (fused on CUDA in bf16/fp16/fp32, aten on the CPU and in fp64: kernels/README.md)", of(&TrainConfig::kernels), {"auto", "aten", "fused"}));
  t.push_back(choice("attention", "Hardware", "with --kernels fused: the attention core. sdpa (ATen's scaled_dot_product_attention: its flash / cuDNN kernels, the fastest measured) | naive | flash-wmma | flash-mma (the hand-written ladder of kernels/: rung 0 with the S x S scores in global memory, FlashAttention-2's WMMA rung, its register-resident mma.sync rung; kernels/README.md)", of(&TrainConfig::attention), {"sdpa", "naive", "flash-wmma", "flash-mma"}));
  t.push_back(choice("recompute", "Parallelism", "activation recomputation: none | selective (attention core, norms, SwiGLU activation) | full (each layer keeps only its input)", of(&TrainConfig::recompute), {"none", "selective", "full"}));
  Flag layout = text("cp-layout", "Parallelism", "contiguous | zigzag (rank i: chunks i and 2cp-1-i of 2cp, equal causal work)", of(&TrainConfig::cp_layout));
  layout.set = [](RunConfig& c, const std::string& name) { c.cp_layout = cp_layout_name(parse_cp_layout(name)); };
  t.push_back(layout);
  Flag mode = text("cp-mode", "Parallelism", "ring (k, v round the cp group) | ulysses (all-to-alls turn the sequence split into a head split around attention; nH/tp divisible by cp) | hybrid (all-to-all over --cp-ulysses ranks, a ring over cp/that): context_parallel/README.md", of(&TrainConfig::cp_mode));
  mode.set = [](RunConfig& c, const std::string& name) { c.cp_mode = cp_mode_name(parse_cp_mode(name)); };
  t.push_back(mode);
  t.push_back(integer("cp-ulysses", "Parallelism", "--cp-mode hybrid: the all-to-all group size U (1 < U < cp, dividing cp and nH/tp); cp/U ranks form each ring", of(&TrainConfig::cp_ulysses), {">=", 0, double(k << 16)}));
  t.push_back(on_off("sp", "Parallelism", "sequence parallelism with --tp: the activations between blocks split along the sequence", of(&TrainConfig::sp)));
  Flag zero = integer("zero", "Parallelism", "ZeRO stage over the cp x dp group: 0 (plain data parallelism) | 1 (master weights and AdamW moments sharded) | 2 (gradients too) | 3 (parameters too, gathered per layer)", of(&TrainConfig::zero), {">=", 0, 3});
  zero.check = [](const RunConfig& c, Problems& p) {
    if (c.zero < 0 || c.zero > 3) p.push_back("--zero must be 0, 1, 2 or 3, got " + value_text(c.zero));
  };
  t.push_back(zero);
  t.push_back(integer("zero-shard", "Parallelism", "HSDP, with --zero >= 1: ZeRO's slices over groups of N consecutive dp ranks (x cp; inside a node), replicated over the dp/N groups, whose slices are averaged by one all-reduce per step (0: over the whole cp x dp group; zero/zero_groups.h)", of(&TrainConfig::zero_shard), {">=", 0, double(k << 16)}));
  t.push_back(integer("zero-hpz", "Parallelism", "ZeRO++'s secondary shard, with --zero 3: after a layer's forward keep its parameters sharded over N consecutive dp ranks of the shard group (1/N of them held until its backward), so the backward's gather stays among those N (0: none)", of(&TrainConfig::zero_hpz), {">=", 0, double(k << 16)}));
  t.push_back(on_off("zero-offload", "Parallelism", "with --zero >= 1 on --device cuda: this rank's master weights and AdamW moments live in pinned CPU memory and AdamW runs on the CPU (ZeRO-Offload)", of(&TrainConfig::zero_offload)));
  Flag dp_mode{"dp-mode", "Parallelism", "naive (all-reduce after backward) | bucketed (overlapped with backward)"};
  dp_mode.set = [](RunConfig& c, const std::string& name) {
    if (name == "naive") c.dp_mode = DpMode::kNaive;
    else if (name == "bucketed") c.dp_mode = DpMode::kBucketed;
    else throw std::invalid_argument("--dp-mode must be naive or bucketed, got '" + name + "'");
  };
  dp_mode.show = [](const RunConfig& c) { return std::string(dp_mode_name(c.dp_mode)); };
  t.push_back(dp_mode);
  t.push_back(real("dp-bucket-mb", "Parallelism", "bucket size of bucketed data parallelism (and ZeRO-1/2), MiB", of(&TrainConfig::dp_bucket_mb), {">", 0, double(k << 20)}));
}

// Hangs: the collectives' timeout and the flight recorder (runtime/observe/flight_dump.h).
void add_hang_flags(std::vector<Flag>& t) {
  t.push_back(integer("timeout-s", "Hangs", "abort the job when a collective waits longer than this (NCCL: counted from when it was queued)", of(&TrainConfig::timeout_s), {">", 0, 7.0 * 24 * 3600}));
  t.push_back(text("flight-recorder", "Hangs", "each rank keeps its last communications (runtime/observe/flight_recorder.h) and writes them to DIR/comms-rank<R>.json on a timeout, SIGTERM/SIGINT or an error; scripts/hang_report.py DIR says what went wrong (default: <--save-dir>/flight, else flight/; off: none)", of(&TrainConfig::flight_recorder)));
  t.push_back(integer("flight-entries", "Hangs", "how many communications each rank's flight recorder keeps", of(&TrainConfig::flight_entries), {">=", 1, double(1 << 24)}));
  t.push_back(on_off("flight-dump-at-end", "Hangs", "write the flight recorder's files at the end of a run that went well too", of(&TrainConfig::flight_dump_at_end)));
}

// What a run writes as it goes: metrics, the memory trace, the profile.
void add_output_flags(std::vector<Flag>& t) {
  t.push_back(text("run-dir", "Output", "every output of the run under this folder, with fixed names (metrics.jsonl, memory.jsonl, pp_trace.json, narration.txt, rank-<R>.json ledgers, estimate.json, flight/, command.txt, config.json: runtime/preflight/run_dir.h); a flag given keeps its own path; python3 scripts/run_report.py DIR draws DIR/report.html", of(&TrainConfig::run_dir)));
  t.push_back(text("metrics-file", "Output", "write one JSON object per step to this file", of(&TrainConfig::metrics_file)));
  t.push_back(text("memory-trace", "Learning", "write this rank 0's tensor memory at every phase of every step (start, each micro-batch's forward and backward, sync, optimizer) as JSON lines; scripts/plot_memory.py draws it", of(&TrainConfig::memory_trace)));
  t.push_back(text("profile", "Learning", "record steps with LibTorch's profiler (CPU ops, CUDA kernels) into DIR/trace-rank<R>.json, which Perfetto (ui.perfetto.dev) and chrome://tracing open, and print the top operators and kernels by time (DIR/top-rank<R>.txt)", of(&TrainConfig::profile)));
  Flag profile_steps{"profile-steps", "Learning", "with --profile: the steps recorded, A:B (1-based, inclusive; default: two steps after warm-up, 3:4)"};
  profile_steps.set = [](RunConfig& c, const std::string& text) {
    const size_t colon = text.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("--profile-steps: '" + text + "' is not A:B (first and last step, e.g. 3:4)");
    c.profile_first = to_integer("profile-steps", text.substr(0, colon));
    c.profile_last = to_integer("profile-steps", text.substr(colon + 1));
  };
  profile_steps.show = [](const RunConfig& c) {
    return c.profile_first == 0 ? std::string("") : value_text(c.profile_first) + ":" + value_text(c.profile_last);
  };
  profile_steps.check = [](const RunConfig& c, Problems& p) {
    if (c.profile_first == 0 && c.profile_last == 0) return;
    if (c.profile_first < 1 || c.profile_last < c.profile_first)
      p.push_back("--profile-steps must be A:B with 1 <= A <= B, got " + value_text(c.profile_first) + ":" + value_text(c.profile_last));
    else if (c.profile_last > c.steps)
      p.push_back("--profile-steps " + value_text(c.profile_first) + ":" + value_text(c.profile_last) + " ends after the last step (--steps " +
                  value_text(c.steps) + ")");
    else if (c.stop_at_step > 0 && c.profile_last > c.stop_at_step)
      p.push_back("--profile-steps " + value_text(c.profile_first) + ":" + value_text(c.profile_last) +
                  " ends after --stop-at-step " + value_text(c.stop_at_step) + ": those steps would never run");
  };
  t.push_back(profile_steps);
}

// Checkpoints and the whole model's parameters (runtime/checkpoint/).
void add_checkpoint_flags(std::vector<Flag>& t) {
  const int64_t k = 1;  // (k << n): 2^n, the bounds below
  t.push_back(text("save-params", "Output", "write the final full parameters to this file (safetensors, Hugging Face names)", of(&TrainConfig::save_params)));
  t.push_back(text("save-dir", "Output", "write checkpoints (master weights, AdamW moments, step, loss scale) into this directory, one step-NNNNNN/ each", of(&TrainConfig::save_dir)));
  t.push_back(integer("save-every", "Output", "a checkpoint every N steps (0: only at the end of the run; always at the end when --save-dir is set)", of(&TrainConfig::save_every), {">=", 0, kNoLimit, " (0: only at the end)"}));
  t.push_back(integer("keep-checkpoints", "Output", "keep the newest K checkpoints in --save-dir", of(&TrainConfig::keep_checkpoints), {">=", 1, double(k << 20)}));
  t.push_back(text("resume", "Output", "continue from a checkpoint: a --save-dir (its newest) or one step-NNNNNN directory; any mesh", of(&TrainConfig::resume)));
  t.push_back(text("check-checkpoint", "Output", "verify a checkpoint (a step-NNNNNN directory, or a --save-dir: its newest) without training: every tensor of every rank file against the manifest (name, dtype, shape, checksum); print its step, mesh, model and bytes per file, or what is wrong (exit 2)", of(&TrainConfig::check_checkpoint)));
  t.push_back(on_off("async-save", "Output", "a checkpoint is copied to host memory at the step boundary and written in the background while training goes on; the next save, or the end of the run, waits for it", of(&TrainConfig::async_save)));
  Flag stop = integer("stop-at-step", "Output", "stop after this step (0: --steps); the learning-rate schedule still runs to --steps, so a later --resume continues it", of(&TrainConfig::stop_at_step), {">=", 0, kNoLimit});
  stop.check = [](const RunConfig& c, Problems& p) {
    if (c.stop_at_step < 0 || c.stop_at_step > c.steps)
      p.push_back("--stop-at-step must be in [0, --steps = " + value_text(c.steps) + "], got " + value_text(c.stop_at_step));
  };
  t.push_back(stop);
}

// The end of a run (runtime/text/generate.h), the step line, and what narrates a run.
void add_end_of_run_flags(std::vector<Flag>& t) {
  const int64_t k = 1;  // (k << n): 2^n, the bounds below
  t.push_back(text("export-hf", "Output", "write the final weights as a Hugging Face folder (config.json + model.safetensors) that transformers' LlamaForCausalLM (MixtralForCausalLM for a mixture of experts).from_pretrained loads", of(&TrainConfig::export_hf)));
  t.push_back(text("eval", "Output", "a JSON file {\"input_ids\": [[ids...], ...]}: after training (or with --steps 0), print the next-token loss on it", of(&TrainConfig::eval)));
  t.push_back(text("eval-logits", "Output", "with --eval: write {\"loss\": ..., \"logits\": [B][S][V]} to this JSON file", of(&TrainConfig::eval_logits)));
  t.push_back(text("tokenizer", "Output", "a folder holding tokenizer.json (scripts/prepare_data.py's output, a Hugging Face model folder) or the file: samples and --prompt as text; --vocab-size follows it", of(&TrainConfig::tokenizer)));
  t.push_back(text("prompt", "Output", "with --tokenizer: at the end, print this text and its greedy continuation by --generate tokens", of(&TrainConfig::prompt)));
  Flag prompt{"prompt-ids", "Output", "comma-separated token ids: at the end, print their greedy continuation by --generate tokens (ids in, ids out; no tokenizer needed)"};
  prompt.set = [](RunConfig& c, const std::string& text) {
    if (text.back() == ',' || text.find(",,") != std::string::npos)
      throw std::invalid_argument("--prompt-ids: '" + text + "' has an empty id (comma-separated integers >= 0)");
    std::stringstream ids(text);
    for (std::string id; std::getline(ids, id, ',');) {
      size_t used = 0;
      int64_t v = -1;
      try { v = std::stoll(id, &used); } catch (const std::exception&) { used = 0; }
      if (used == 0 || used != id.size() || v < 0)
        throw std::invalid_argument("--prompt-ids: '" + id + "' is not a token id (comma-separated integers >= 0)");
      c.prompt_ids.push_back(v);
    }
  };
  prompt.show = [](const RunConfig& c) {
    std::string ids;
    for (int64_t id : c.prompt_ids) ids += value_text(id) + ",";
    return ids;
  };
  t.push_back(prompt);
  t.push_back(integer("log-every", "Output", "print a line every N steps (0: every step of short runs, ~50 lines otherwise)", of(&TrainConfig::log_every), {">=", 0, kNoLimit, " (0: automatic)"}));
  t.push_back(on_off("comm-report", "Learning", "print, at the end, the calls and elements of every collective per group and per step", of(&TrainConfig::comm_report)));
  t.push_back(text("wait-for-debugger", "Learning", "none | all | RANK: that rank (or every rank) prints its pid and waits until a debugger attaches (gdb -p PID, VS Code: scripts/vscode/launch.json)", of(&TrainConfig::wait_for_debugger)));
  t.push_back(on_off("explain", "Learning", "narrate the first step, rank by rank: what each rank holds, every communication with its group, shapes and line of code", of(&TrainConfig::explain)));
  t.push_back(integer("generate", "Output", "samples printed after training (0: none)", of(&TrainConfig::generate), {">=", 0, double(k << 20)}));
}

}  // namespace

const std::vector<Flag>& flag_table() {
  static const std::vector<Flag> table = [] {
    std::vector<Flag> t;  // --help lists each group's flags in this order
    add_model_flags(t);
    add_hardware_flags(t);
    add_training_flags(t);
    add_parallelism_flags(t);
    add_hang_flags(t);
    add_output_flags(t);
    add_checkpoint_flags(t);
    add_end_of_run_flags(t);
    add_planner_flags(t);
    return t;
  }();
  return table;
}

}  // namespace picotron::flag_row
