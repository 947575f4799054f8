// runtime/observe/report.cpp — see report.h.
#include "runtime/observe/report.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "picotron/distributed.h"
#include "picotron/dtype.h"
#include "picotron/format.h"
#include "runtime/observe/measure.h"
#include "runtime/output/print0.h"
#include "runtime/cli/train_config.h"
#include "zero/zero_groups.h"

namespace picotron {

std::string model_summary(const TrainConfig& c) {
  const LlamaConfig& m = c.llama;
  const int64_t h = m.hidden_size, kv = m.num_key_value_heads * m.head_dim();
  const int64_t attention = 2 * h * h + 2 * h * kv, total = count_parameters(m);
  const int64_t mlp = m.is_moe() ? m.num_local_experts * (3 * h * m.intermediate_size + h)  // E experts + the router
                                 : 3 * h * m.intermediate_size;
  const int64_t layer = attention + mlp + 2 * h;
  std::ostringstream o;
  o << "model " << c.model << ": H=" << h << " I=" << m.intermediate_size << " L=" << m.num_hidden_layers
    << " nH=" << m.num_attention_heads << " nKV=" << m.num_key_value_heads << " Hd=" << m.head_dim()
    << " V=" << m.vocab_size << " rope_theta=" << m.rope_theta << " tied=" << (m.tie_word_embeddings ? "yes" : "no") << "\n"
    << "  embedding          " << with_commas(m.vocab_size * h) << "\n"
    << "  per layer          " << with_commas(layer) << " (attention " << with_commas(attention) << ", mlp "
    << with_commas(mlp) << (m.is_moe() ? " = " + std::to_string(m.num_local_experts) + " experts of " +
                                             with_commas(3 * h * m.intermediate_size) + " + router " +
                                             with_commas(m.num_local_experts * h) + ", top-" +
                                             std::to_string(m.num_experts_per_tok)
                                       : std::string())
    << ", norms " << with_commas(2 * h) << ")\n"
    << "  " << m.num_hidden_layers << " layers" << std::string(13 - std::to_string(m.num_hidden_layers).size(), ' ')
    << with_commas(m.num_hidden_layers * layer) << "\n"
    << "  final norm         " << with_commas(h) << "\n"
    << "  lm_head            " << (m.tie_word_embeddings ? "tied to the embedding" : with_commas(m.vocab_size * h)) << "\n"
    << "  total parameters   " << total << " (" << with_commas(total) << ")\n"
    << "  weights " << human_bytes(double(total) * torch::elementSize(scalar_type(c.dtype))) << " in "
    << precision_name(c.dtype) << "; AdamW training state ~" << human_bytes(double(total) * 16)
    << " (fp32 master + 2 moments + main grad)";
  return o.str();
}

std::string plan_summary(const TrainConfig& c, const MeshShape& shape,
                         const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of) {
  const auto dtype = scalar_type(c.dtype);
  const double weight_bytes = double(torch::elementSize(dtype));
  const bool wide = dtype == torch::kFloat32 || dtype == torch::kFloat64;
  const double state_elem = dtype == torch::kFloat64 ? 8.0 : 4.0;  // main grad, moments, master
  // training state per parameter: main grad + 2 moments (+ a master copy unless the weights
  // are it); ZeRO keeps 1/N of the moments and master (stage 1), of the grad (stage 2) and
  // of the weights (stage 3), N = cp x dp, or cp x --zero-shard with HSDP (zero/README.md;
  // the < N padding elements are not counted, nor stage 3's gathered layers and hpZ's parts)
  const double n = zero_block_ranks(c.zero_shard, shape.cp, 1, shape.dp * shape.cp);
  // (stage 1 keeps the full main grad and, beside it, its reduce-scattered 1/N slice)
  const double optimizer_share = c.zero >= 1 ? 1.0 / n : 1.0;
  const double grad_share = c.zero >= 2 ? 1.0 / n : c.zero == 1 ? 1.0 + 1.0 / n : 1.0;
  const double weight_share = c.zero >= 3 ? 1.0 / n : 1.0;
  const double state_bytes = state_elem * (grad_share + (wide ? 2.0 : 3.0) * optimizer_share);
  // Ranks with the same count share a line: "ranks 0-3: ...", in rank order.
  std::ostringstream o;
  o << "parameters per rank (" << precision_name(c.dtype) << " weights; training state = main grad + AdamW moments"
    << (wide ? "" : " + fp32 master");
  if (c.zero >= 1)
    o << "; zero-" << c.zero << ": " << (c.zero >= 3 ? "weights, " : "") << (c.zero >= 2 ? "main grad, " : "") << "moments"
      << (wide ? "" : ", master")
      << (c.zero_shard > 0 ? " over cp x --zero-shard = " : " over cp x dp = ") << int(n);
  o << "):";
  int first = 0;
  int64_t count = -1;
  auto flush = [&](int last) {
    o << "\n  rank" << (last > first ? "s " + std::to_string(first) + "-" + std::to_string(last) : " " + std::to_string(first))
      << ": " << with_commas(count) << " parameters, weights " << human_bytes(double(count) * weight_bytes * weight_share)
      << ", training state " << human_bytes(double(count) * state_bytes);
  };
  for (int r = 0; r < shape.world_size(); ++r) {
    const int64_t n = local_parameter_count(shard_plan_of(coords_of(shape, r)));
    if (r > 0 && n != count) { flush(r - 1); first = r; }
    count = n;
  }
  flush(shape.world_size() - 1);
  return o.str();
}

double StepStats::expert_imbalance() const {
  double sum = 0, most = 0;
  for (double n : tokens_per_expert) sum += n, most = std::max(most, n);
  return sum > 0 ? most / (sum / double(tokens_per_expert.size())) : 0.0;
}

std::string step_line(const StepStats& s) {
  char mfu_text[16] = "n/a", val_text[32] = "", moe_text[32] = "", line[320];
  if (s.mfu >= 0) std::snprintf(mfu_text, sizeof(mfu_text), "%.1f%%", s.mfu * 100);
  if (s.val_loss) std::snprintf(val_text, sizeof(val_text), " | val %#.6g", *s.val_loss);
  if (!s.tokens_per_expert.empty()) std::snprintf(moe_text, sizeof(moe_text), " | experts max/mean %.2f", s.expert_imbalance());
  std::snprintf(line, sizeof(line), "step %5lld/%lld | loss %#.6g%s | lr %.3e | grad norm %.4f | %s tok/s | mfu %s | mem %s%s%s",
                (long long)s.step, (long long)s.steps, s.loss, val_text, s.lr, s.grad_norm,
                with_commas(int64_t(s.tokens_per_s)).c_str(), mfu_text, human_bytes(double(s.peak_mem_bytes)).c_str(),
                moe_text, s.skipped ? " | non-finite grad norm: optimizer step skipped" : "");
  return line;
}

bool should_log(int64_t step, int64_t steps, int log_every) {
  const int64_t every = log_every > 0 ? log_every : std::max<int64_t>(1, (steps + 49) / 50);  // ceil(steps / 50)
  return step == 1 || step == steps || step % every == 0;
}

MetricsWriter::MetricsWriter(const std::string& path) {
  if (!path.empty()) out_ = OutputFile("--metrics-file", path);
}

void MetricsWriter::write(const StepStats& s) {
  if (!out_.active()) return;
  // Non-finite numbers (a diverged loss, an fp16 overflow) are written as null: valid JSON.
  nlohmann::ordered_json j = {{"step", s.step},          {"loss", s.loss},
                      {"lr", s.lr},              {"grad_norm", s.grad_norm},
                      {"tokens_per_s", s.tokens_per_s}, {"mfu", nullptr},
                      {"peak_mem_bytes", s.peak_mem_bytes}, {"skipped", s.skipped}};
  if (s.mfu >= 0) j["mfu"] = s.mfu;
  if (s.val_loss) j["val_loss"] = *s.val_loss;  // only on the steps that evaluate (--val-data)
  if (!s.tokens_per_expert.empty()) {  // a mixture of experts: the routing of the step's global batch
    j["tokens_per_expert"] = s.tokens_per_expert;
    j["expert_imbalance"] = s.expert_imbalance();
  }
  out_.write(j.dump() + "\n");
}

MemoryTraceWriter::MemoryTraceWriter(const std::string& path) {
  if (!path.empty()) out_ = OutputFile("--memory-trace", path);
}

void MemoryTraceWriter::write(int64_t step, const std::string& phase, int64_t micro, double seconds, int64_t bytes,
                              int64_t peak) {
  if (!out_.active()) return;
  nlohmann::ordered_json j = {{"step", step}, {"phase", phase}, {"micro", micro}, {"t", seconds},
                              {"bytes", bytes}, {"peak", peak}};
  out_.write(j.dump() + "\n");
}

std::string data_summary(const TrainConfig& cfg, const BatchLoader& loader) {
  return "data: " + std::string(cfg.data == "synthetic" ? "synthetic" : cfg.data) + "; global batch " +
         std::to_string(loader.global_batch_rows()) + " x " + std::to_string(cfg.seq_len) + " = " +
         with_commas(loader.tokens_per_step()) + " tokens/step (micro-batch " + std::to_string(cfg.micro_batch_size) +
         " x grad-acc " + std::to_string(cfg.grad_acc_steps) + " x dp " + std::to_string(cfg.dp) +
         "); data parallelism: " + dp_mode_name(cfg.dp_mode);
}

RunLog::RunLog(const RunLogSettings& s, int rank, torch::Device device)
    : settings_(s), rank_(rank), device_(device), metrics_(rank == 0 ? s.metrics_file : ""),
      memory_trace_(rank == 0 ? s.memory_trace : "") {}

void RunLog::memory(int64_t step, const char* phase, int64_t micro) {
  if (memory_trace_.enabled())
    memory_trace_.write(step, phase, micro, clock_.seconds(), current_memory_bytes(device_), peak_memory_bytes(device_));
}

bool RunLog::step_done(const StepStats& s) {
  const bool logged = should_log(s.step, s.steps, settings_.log_every) || s.val_loss.has_value();
  if (rank_ == 0 && logged) std::cout << step_line(s) << std::endl;
  metrics_.write(s);
  const bool bad = !std::isfinite(s.loss) || (s.skipped && !settings_.fp16);
  if (!bad) {
    last_good_step_ = s.step, last_good_loss_ = s.loss;
    return true;
  }
  ++bad_steps_;
  if (rank_ == 0 && !logged) std::cout << step_line(s) << std::endl;
  print0(rank_, "step " + std::to_string(s.step) + ": non-finite loss or gradient norm (bad step " +
                    std::to_string(bad_steps_) + " of --max-bad-steps " + std::to_string(settings_.max_bad_steps) + ")");
  if (bad_steps_ < settings_.max_bad_steps) return true;
  if (rank_ == 0)
    report_error(rank_, "the run diverged: " + std::to_string(bad_steps_) + " steps had a non-finite loss or "
                 "gradient norm (--max-bad-steps " + std::to_string(settings_.max_bad_steps) + "); the last finite loss " +
                 (last_good_step_ > 0 ? "was " + std::to_string(last_good_loss_) + " at step " +
                                            std::to_string(last_good_step_) : "never came") +
                 ". Lower --lr (or --init-std), or raise --warmup-steps");
  finish();  // what was written stays: valid JSON lines
  return false;
}

void RunLog::finish() {
  metrics_.finish();
  memory_trace_.finish();
}

}  // namespace picotron
