// picotron/config.cpp — flag parsing (cxxopts, the only place flags are read), and
// validation that reports every problem with its numbers. (Presets: presets.cpp.)
#include "picotron/config.h"

#include "context_parallel/cp_layout.h"
#include "pipeline_parallel/schedules.h"

#include <cxxopts.hpp>

#include <cctype>
#include <cmath>
#include <set>
#include <sstream>
#include <tuple>
#include <stdexcept>

namespace picotron {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFP32: return "fp32";
    case Precision::kFP64: return "fp64";
    case Precision::kBF16: return "bf16";
    case Precision::kFP16: return "fp16";
  }
  return "?";
}

const char* dp_mode_name(DpMode m) { return m == DpMode::kNaive ? "naive" : "bucketed"; }

// cxxopts says "Argument 'many' failed to parse" without the flag: find the flag that
// was given that value and say "--steps: 'many' is not a valid value".
static std::string name_the_flag(const std::string& what, int argc, const char* const* argv) {
  // cxxopts says "Option 's' does not exist" for "-steps": one dash makes letter flags.
  if (what.find("does not exist") != std::string::npos)
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.size() > 2 && arg[0] == '-' && arg[1] != '-' && !std::isdigit(static_cast<unsigned char>(arg[1])))
        return arg + ": long flags take two dashes (--" + arg.substr(1) + ")";
    }
  // "Argument 'X' failed to parse" (cxxopts quotes with ‘X’ in UTF-8, or 'X'): name the
  // flag whose value is exactly X.
  const auto end = what.find(" failed to parse");
  if (what.rfind("Argument ", 0) != 0 || end == std::string::npos) return what;
  std::string bad = what.substr(9, end - 9);  // the quoted value
  for (const std::string quote : {"\u2018", "\u2019", "'"}) {
    if (bad.rfind(quote, 0) == 0) bad = bad.substr(quote.size());
    if (bad.size() >= quote.size() && bad.compare(bad.size() - quote.size(), quote.size(), quote) == 0)
      bad = bad.substr(0, bad.size() - quote.size());
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], flag, value;
    const auto eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) { flag = arg.substr(0, eq); value = arg.substr(eq + 1); }
    else if (i > 1 && std::string(argv[i - 1]).rfind("--", 0) == 0) { flag = argv[i - 1]; value = arg; }
    if (flag.empty()) continue;
    if (value.empty() && bad.empty()) return flag + ": empty value";  // "--steps ''"
    if (!value.empty() && value == bad) return flag + ": '" + value + "' is not a valid value";
  }
  return what;
}

// cxxopts reads numbers with a stream, which stops at the first character it cannot use:
// "--lr 1e-3x" would train with 1e-3. Every real-valued flag must be a number, whole.
static void check_real_values(const cxxopts::ParseResult& r) {
  static const std::set<std::string> real_flags = {"rope-theta", "rms-norm-eps", "lr", "min-lr", "weight-decay",
                                                   "beta1", "beta2", "adam-eps", "grad-clip", "init-std"};
  for (const auto& kv : r.arguments()) {
    if (!real_flags.count(kv.key())) continue;
    size_t used = 0;
    double v = 0;
    try { v = std::stod(kv.value(), &used); } catch (const std::exception&) { used = 0; }
    if (used == 0 || used != kv.value().size() || !std::isfinite(v))
      throw std::invalid_argument("--" + kv.key() + ": '" + kv.value() + "' is not a finite number");
  }
}

ParsedArgs parse_args(int argc, const char* const* argv) {
  TrainConfig d;  // defaults, shown in --help
  cxxopts::Options opts("train", "picotron: train a LLaMA-like model with 4D parallelism");
  auto s = [](auto v) { std::ostringstream o; o << v; return o.str(); };
  // clang-format off
  opts.add_options("Model")
    ("model", "preset: tiny, smollm-135m, smollm-360m, smollm-1.7b, llama2-7b, llama3-8b", cxxopts::value<std::string>()->default_value(d.model))
    ("hidden-size", "override hidden_size (H)", cxxopts::value<int64_t>())
    ("intermediate-size", "override intermediate_size (I)", cxxopts::value<int64_t>())
    ("num-hidden-layers", "override num_hidden_layers (L)", cxxopts::value<int64_t>())
    ("num-attention-heads", "override num_attention_heads (nH)", cxxopts::value<int64_t>())
    ("num-key-value-heads", "override num_key_value_heads (nKV)", cxxopts::value<int64_t>())
    ("vocab-size", "override vocab_size (V)", cxxopts::value<int64_t>())
    ("rope-theta", "override rope_theta", cxxopts::value<double>())
    ("max-position-embeddings", "override max_position_embeddings", cxxopts::value<int64_t>())
    ("rms-norm-eps", "override rms_norm_eps", cxxopts::value<double>())
    ("tie-word-embeddings", "override tie_word_embeddings (--tie-word-embeddings=false unties)", cxxopts::value<bool>())
    ("init-from", "start from a Hugging Face LLaMA folder (config.json + model.safetensors, or sharded with model.safetensors.index.json): its shape and weights", cxxopts::value<std::string>())
    ("dry-run", "print the model summary (exact parameter count) and exit", cxxopts::value<bool>());
  opts.add_options("Hardware")
    ("device", "cpu | cuda | auto (cuda when a GPU is present)", cxxopts::value<std::string>()->default_value(d.device))
    ("dtype", "fp32 | fp64 | bf16 | fp16 (default: bf16 on cuda, fp32 on cpu)", cxxopts::value<std::string>())
    ("threads", "CPU intra-op threads per rank (0: cores / ranks on this node)", cxxopts::value<int>()->default_value(s(d.threads)));
  opts.add_options("Training")
    ("seq-len", "tokens per sequence (S)", cxxopts::value<int64_t>()->default_value(s(d.seq_len)))
    ("micro-batch-size", "sequences per micro-batch per data-parallel rank (B)", cxxopts::value<int64_t>()->default_value(s(d.micro_batch_size)))
    ("grad-acc-steps", "micro-batches accumulated per optimizer step", cxxopts::value<int64_t>()->default_value(s(d.grad_acc_steps)))
    ("steps", "optimizer steps", cxxopts::value<int64_t>()->default_value(s(d.steps)))
    ("lr", "peak learning rate", cxxopts::value<double>()->default_value(s(d.lr)))
    ("warmup-steps", "linear warmup steps (default: 5% of --steps)", cxxopts::value<int64_t>())
    ("min-lr", "learning rate at the end of the cosine decay", cxxopts::value<double>()->default_value(s(d.min_lr)))
    ("weight-decay", "AdamW weight decay (not applied to norms)", cxxopts::value<double>()->default_value(s(d.weight_decay)))
    ("beta1", "AdamW beta1", cxxopts::value<double>()->default_value(s(d.beta1)))
    ("beta2", "AdamW beta2", cxxopts::value<double>()->default_value(s(d.beta2)))
    ("adam-eps", "AdamW epsilon", cxxopts::value<double>()->default_value(s(d.adam_eps)))
    ("grad-clip", "clip the global gradient norm to this (0: off)", cxxopts::value<double>()->default_value(s(d.grad_clip)))
    ("max-bad-steps", "stop with an error (exit 3) after this many steps with a non-finite loss or gradient norm (fp16 overflow steps with a finite loss do not count)", cxxopts::value<int>()->default_value(s(d.max_bad_steps)))
    ("init-std", "std of the normal initialisation of weight matrices", cxxopts::value<double>()->default_value(s(d.init_std)))
    ("seed", "seed of initialisation and data order", cxxopts::value<uint64_t>()->default_value(s(d.seed)))
    ("data", "arithmetic | synthetic | a text file | a token file (.bin) or a directory of them", cxxopts::value<std::string>()->default_value(d.data));
  opts.add_options("Parallelism")
    ("dp", "data-parallel size", cxxopts::value<int>()->default_value("1"))
    ("tp", "tensor-parallel size", cxxopts::value<int>()->default_value("1"))
    ("pp", "pipeline-parallel size", cxxopts::value<int>()->default_value("1"))
    ("pp-schedule", "pipeline schedule: afab | 1f1b | interleaved | zb-h1", cxxopts::value<std::string>()->default_value(d.pp_schedule))
    ("pp-virtual-stages", "model chunks per pipeline rank (--pp-schedule interleaved: >= 2)", cxxopts::value<int>()->default_value(s(d.pp_virtual_stages)))
    ("pp-trace", "write a Chrome trace (JSON) of every pipeline F/B/W, send and recv on every rank to this file", cxxopts::value<std::string>())
    ("cp", "context-parallel size: each sequence split over cp ranks, attention by ring", cxxopts::value<int>()->default_value("1"))
    ("kernels", "aten (plain ATen ops) | fused (the CUDA kernels of kernels/: RMSNorm, RoPE, SwiGLU, flash attention, linear + cross-entropy, AdamW) | auto (fused on CUDA, aten on the CPU)", cxxopts::value<std::string>()->default_value(d.kernels))
    ("recompute", "activation recomputation: none | selective (attention core, norms, SwiGLU activation) | full (each layer keeps only its input)", cxxopts::value<std::string>()->default_value(d.recompute))
    ("cp-layout", "contiguous | zigzag (rank i: chunks i and 2cp-1-i of 2cp, equal causal work)", cxxopts::value<std::string>()->default_value(d.cp_layout))
    ("sp", "sequence parallelism with --tp: the activations between blocks split along the sequence", cxxopts::value<bool>())
    ("zero", "ZeRO stage over the cp x dp group: 0 (plain data parallelism) | 1 (master weights and AdamW moments sharded) | 2 (gradients too) | 3 (parameters too, gathered per layer)", cxxopts::value<int>()->default_value(s(d.zero)))
    ("zero-offload", "with --zero >= 1 on --device cuda: this rank's master weights and AdamW moments live in pinned CPU memory and AdamW runs on the CPU (ZeRO-Offload)", cxxopts::value<bool>())
    ("dp-mode", "naive (all-reduce after backward) | bucketed (overlapped with backward)", cxxopts::value<std::string>()->default_value(dp_mode_name(d.dp_mode)))
    ("dp-bucket-mb", "bucket size of bucketed data parallelism, MiB", cxxopts::value<double>()->default_value(s(d.dp_bucket_mb)))
    ("timeout-s", "abort the job when a collective waits longer than this (NCCL: counted from when it was queued)", cxxopts::value<int>()->default_value(s(d.timeout_s)));
  opts.add_options("Output")
    ("metrics-file", "write one JSON object per step to this file", cxxopts::value<std::string>())
    ("memory-trace", "write this rank 0's tensor memory at every phase of every step (start, each micro-batch's forward and backward, sync, optimizer) as JSON lines; scripts/plot_memory.py draws it", cxxopts::value<std::string>())
    ("save-params", "write the final full parameters to this file (safetensors, Hugging Face names)", cxxopts::value<std::string>())
    ("save-dir", "write checkpoints (master weights, AdamW moments, step, loss scale) into this directory, one step-NNNNNN/ each", cxxopts::value<std::string>())
    ("save-every", "a checkpoint every N steps (0: only at the end of the run; always at the end when --save-dir is set)", cxxopts::value<int64_t>()->default_value(s(d.save_every)))
    ("keep-checkpoints", "keep the newest K checkpoints in --save-dir", cxxopts::value<int>()->default_value(s(d.keep_checkpoints)))
    ("resume", "continue from a checkpoint: a --save-dir (its newest) or one step-NNNNNN directory; any mesh", cxxopts::value<std::string>())
    ("stop-at-step", "stop after this step (0: --steps); the learning-rate schedule still runs to --steps, so a later --resume continues it", cxxopts::value<int64_t>()->default_value(s(d.stop_at_step)))
    ("export-hf", "write the final weights as a Hugging Face folder (config.json + model.safetensors) that transformers' LlamaForCausalLM.from_pretrained loads", cxxopts::value<std::string>())
    ("eval", "a JSON file {\"input_ids\": [[ids...], ...]}: after training (or with --steps 0), print the next-token loss on it", cxxopts::value<std::string>())
    ("eval-logits", "with --eval: write {\"loss\": ..., \"logits\": [B][S][V]} to this JSON file", cxxopts::value<std::string>())
    ("prompt-ids", "comma-separated token ids: at the end, print their greedy continuation by --generate tokens (ids in, ids out; no tokenizer needed)", cxxopts::value<std::string>())
    ("log-every", "print a line every N steps (0: every step of short runs, ~50 lines otherwise)", cxxopts::value<int>()->default_value(s(d.log_every)))
    ("comm-report", "print, at the end, the calls and elements of every collective per group and per step", cxxopts::value<bool>())
    ("generate", "samples printed after training (0: none)", cxxopts::value<int>()->default_value(s(d.generate)))
    ("h,help", "print this help");
  // clang-format on

  ParsedArgs out;
  for (int i = 1; i < argc; ++i)  // --help wins over any other flag, even a malformed one
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      out.message = opts.help({"Model", "Hardware", "Training", "Parallelism", "Output"});
      return out;
    }
  try {
    auto r = opts.parse(argc, argv);
    check_real_values(r);
    if (!r.unmatched().empty()) throw std::invalid_argument("unexpected argument '" + r.unmatched()[0] + "'");
    // A flag given an empty value ("--metrics-file ''") is a mistake, not "no file".
    for (const auto& kv : r.arguments())
      if (kv.value().empty()) throw std::invalid_argument("--" + kv.key() + ": empty value");
    TrainConfig c;
    c.model = r["model"].as<std::string>();
    for (const char* flag : {"model", "hidden-size", "intermediate-size", "num-hidden-layers", "num-attention-heads",
                             "num-key-value-heads", "vocab-size", "rope-theta", "max-position-embeddings",
                             "rms-norm-eps", "tie-word-embeddings"})
      if (r.count(flag)) c.shape_flags.push_back(flag);
    if (r.count("init-from")) c.init_from = r["init-from"].as<std::string>();
    c.llama = preset(c.model);
    auto& m = c.llama;
    if (r.count("hidden-size")) m.hidden_size = r["hidden-size"].as<int64_t>();
    if (r.count("intermediate-size")) m.intermediate_size = r["intermediate-size"].as<int64_t>();
    if (r.count("num-hidden-layers")) m.num_hidden_layers = r["num-hidden-layers"].as<int64_t>();
    if (r.count("num-attention-heads")) m.num_attention_heads = r["num-attention-heads"].as<int64_t>();
    if (r.count("num-key-value-heads")) m.num_key_value_heads = r["num-key-value-heads"].as<int64_t>();
    if (r.count("vocab-size")) m.vocab_size = r["vocab-size"].as<int64_t>();
    if (r.count("rope-theta")) m.rope_theta = r["rope-theta"].as<double>();
    if (r.count("max-position-embeddings")) m.max_position_embeddings = r["max-position-embeddings"].as<int64_t>();
    if (r.count("rms-norm-eps")) m.rms_norm_eps = r["rms-norm-eps"].as<double>();
    if (r.count("tie-word-embeddings")) m.tie_word_embeddings = r["tie-word-embeddings"].as<bool>();
    c.dry_run = r.count("dry-run") > 0 && r["dry-run"].as<bool>();

    c.device = r["device"].as<std::string>();
    if (c.device != "cpu" && c.device != "cuda" && c.device != "auto")
      throw std::invalid_argument("--device must be cpu, cuda or auto, got '" + c.device + "'");
    if (r.count("dtype")) {
      const std::string t = r["dtype"].as<std::string>();
      c.dtype_given = true;
      if (t == "fp32") c.dtype = Precision::kFP32;
      else if (t == "fp64") c.dtype = Precision::kFP64;
      else if (t == "bf16") c.dtype = Precision::kBF16;
      else if (t == "fp16") c.dtype = Precision::kFP16;
      else throw std::invalid_argument("--dtype must be fp32, fp64, bf16 or fp16, got '" + t + "'");
    }
    c.threads = r["threads"].as<int>();
    c.seq_len = r["seq-len"].as<int64_t>();
    c.micro_batch_size = r["micro-batch-size"].as<int64_t>();
    c.grad_acc_steps = r["grad-acc-steps"].as<int64_t>();
    c.steps = r["steps"].as<int64_t>();
    c.lr = r["lr"].as<double>();
    c.warmup_steps = r.count("warmup-steps") ? r["warmup-steps"].as<int64_t>() : c.steps / 20;
    c.min_lr = r["min-lr"].as<double>();
    c.weight_decay = r["weight-decay"].as<double>();
    c.beta1 = r["beta1"].as<double>();
    c.beta2 = r["beta2"].as<double>();
    c.adam_eps = r["adam-eps"].as<double>();
    c.grad_clip = r["grad-clip"].as<double>();
    c.init_std = r["init-std"].as<double>();
    c.seed = r["seed"].as<uint64_t>();
    c.data = r["data"].as<std::string>();
    c.dp = r["dp"].as<int>();
    c.tp = r["tp"].as<int>();
    c.pp = r["pp"].as<int>();
    c.cp = r["cp"].as<int>();
    c.cp_layout = r["cp-layout"].as<std::string>();
    c.kernels = r["kernels"].as<std::string>();
    if (c.kernels != "auto" && c.kernels != "aten" && c.kernels != "fused")
      throw std::invalid_argument("--kernels must be auto, aten or fused, got '" + c.kernels + "'");
    c.recompute = r["recompute"].as<std::string>();
    if (c.recompute != "none" && c.recompute != "selective" && c.recompute != "full")
      throw std::invalid_argument("--recompute must be none, selective or full, got '" + c.recompute + "'");
    parse_cp_layout(c.cp_layout);  // throws naming the flag and the choices
    c.sp = r.count("sp") > 0 && r["sp"].as<bool>();
    c.zero = r["zero"].as<int>();
    c.zero_offload = r.count("zero-offload") > 0 && r["zero-offload"].as<bool>();
    c.pp_schedule = r["pp-schedule"].as<std::string>();
    parse_schedule(c.pp_schedule);  // throws naming the flag and the choices
    c.pp_virtual_stages = r["pp-virtual-stages"].as<int>();
    if (r.count("pp-trace")) c.pp_trace = r["pp-trace"].as<std::string>();
    const std::string mode = r["dp-mode"].as<std::string>();
    if (mode == "naive") c.dp_mode = DpMode::kNaive;
    else if (mode == "bucketed") c.dp_mode = DpMode::kBucketed;
    else throw std::invalid_argument("--dp-mode must be naive or bucketed, got '" + mode + "'");
    c.dp_bucket_mb = r["dp-bucket-mb"].as<double>();
    c.timeout_s = r["timeout-s"].as<int>();
    if (r.count("metrics-file")) c.metrics_file = r["metrics-file"].as<std::string>();
    if (r.count("memory-trace")) c.memory_trace = r["memory-trace"].as<std::string>();
    if (r.count("save-params")) c.save_params = r["save-params"].as<std::string>();
    if (r.count("save-dir")) c.save_dir = r["save-dir"].as<std::string>();
    if (r.count("export-hf")) c.export_hf = r["export-hf"].as<std::string>();
    if (r.count("eval")) c.eval = r["eval"].as<std::string>();
    if (r.count("eval-logits")) c.eval_logits = r["eval-logits"].as<std::string>();
    if (r.count("prompt-ids")) {
      std::stringstream ids(r["prompt-ids"].as<std::string>());
      const std::string text = r["prompt-ids"].as<std::string>();
      if (text.back() == ',' || text.find(",,") != std::string::npos)
        throw std::invalid_argument("--prompt-ids: '" + text + "' has an empty id (comma-separated integers >= 0)");
      for (std::string id; std::getline(ids, id, ',');) {
        size_t used = 0;
        int64_t v = -1;
        try { v = std::stoll(id, &used); } catch (const std::exception&) { used = 0; }
        if (used == 0 || used != id.size() || v < 0)
          throw std::invalid_argument("--prompt-ids: '" + id + "' is not a token id (comma-separated integers >= 0)");
        c.prompt_ids.push_back(v);
      }
    }
    c.save_every = r["save-every"].as<int64_t>();
    c.keep_checkpoints = r["keep-checkpoints"].as<int>();
    if (r.count("resume")) c.resume = r["resume"].as<std::string>();
    c.stop_at_step = r["stop-at-step"].as<int64_t>();
    c.max_bad_steps = r["max-bad-steps"].as<int>();
    c.log_every = r["log-every"].as<int>();
    c.comm_report = r.count("comm-report") > 0 && r["comm-report"].as<bool>();
    c.generate = r["generate"].as<int>();
    out.config = c;
  } catch (const std::exception& e) {
    out.message = "error: " + name_the_flag(e.what(), argc, argv) + " (see --help)";
    out.exit_code = 2;
  }
  return out;
}

}  // namespace picotron
