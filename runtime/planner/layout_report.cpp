// runtime/planner/layout_report.cpp — what `build/train --plan` prints (layout_search.h): the search's
// counts, the best layouts with their memory, step time split, MFU, the cheatsheet rule
// each follows and the command line that runs it; or, when nothing fits, what would; or,
// under --plan-layout, the prediction of the layout given.
#include <cstdio>
#include <sstream>

#include "runtime/cli/flags.h"
#include "runtime/planner/memory_per_token.h"
#include "runtime/planner/layout_search.h"
#include "picotron/format.h"

namespace picotron {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}
std::string general(double v) {  // 4 significant digits: 989, 0.02134
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}
std::string gb(double bytes) { return fixed(bytes / 1e9, 1) + " GB"; }
std::string ms(double s) { return fixed(s * 1e3, 0); }

// "dp 4 x tp 2 x pp 1 x cp 1, ep 2, zero 1 +offload, recompute selective, kernels fused, ..."
// (ep: a mixture of experts; kernels: where they are not what --kernels auto picks)
std::string layout_text(const RunConfig& c) {
  std::ostringstream o;
  o << "dp " << c.dp << " x tp " << c.tp << " x pp " << c.pp << " x cp " << c.cp;
  if (c.cp > 1 && c.cp_mode != "ring") o << " " << c.cp_mode << (c.cp_ulysses ? " " + std::to_string(c.cp_ulysses) : "");
  if (c.ep > 1) o << ", ep " << c.ep;
  if (c.sp) o << " +sp";
  o << ", zero " << c.zero << (c.zero_shard > 0 ? " shard " + std::to_string(c.zero_shard) : "")
    << (c.zero_hpz > 0 ? " hpz " + std::to_string(c.zero_hpz) : "") << (c.zero_offload ? " +offload" : "")
    << ", recompute " << c.recompute;
  if (fused_pieces(c).on != auto_means_fused(c)) o << ", kernels " << (fused_pieces(c).on ? "fused" : "aten");
  if (c.pp > 1) o << ", " << c.pp_schedule << (c.pp_virtual_stages > 1 ? " v" + std::to_string(c.pp_virtual_stages) : "");
  o << ", micro-batch " << c.micro_batch_size << " x grad-acc " << c.grad_acc_steps;
  return o.str();
}

// --plan-layout: the given layout's prediction alone, with exact bytes for each pipeline
// stage (a rank's --dry-run estimate) and the step in ms to 0.1 (CPU-sized runs).
std::string layout_prediction_text(const RunConfig& given, const ShardPlanFor& shard_plan_for) {
  RunConfig c = given;
  if (!c.dtype_given) c.dtype = c.device == "cuda" ? Precision::kBF16 : Precision::kFP32;  // what the run picks
  const Candidate p = evaluate_layout(c, shard_plan_for);
  const StepTime& t = p.time;
  std::ostringstream o;
  o << "plan-layout: " << c.model << " (" << with_commas(count_parameters(c.llama)) << " parameters), "
    << precision_name(c.dtype) << ", --seq-len " << c.seq_len << ": " << layout_text(c) << " = "
    << with_commas(int64_t(tokens_per_step(c))) << " tokens/step\n";
  o << "  cost model: " << general(c.planner.peak_tflops) << " TFLOP/s peak, this layout's GEMMs at "
    << fixed(compute_efficiency(c) * 100, 1) << "% of it; links " << general(c.planner.intra_node_gbps) << " GB/s in a node, "
    << general(c.planner.inter_node_gbps) << " GB/s between nodes, " << c.planner.gpus_per_node << " per node\n";
  for (size_t stage = 0; stage < p.stage_peak_bytes.size(); ++stage)
    o << "  memory of stage " << stage << " at its peak: " << with_commas(int64_t(p.stage_peak_bytes[stage])) << " B ("
      << human_bytes(p.stage_peak_bytes[stage]) << ")"
      << (p.stage_peak_bytes[stage] > c.planner.gpu_memory_gb * 1e9 ? ", above --gpu-memory" : "") << "\n";
  o << "  step " << fixed(t.total() * 1e3, 1) << " ms = compute " << fixed(t.compute * 1e3, 1) << " + communication "
    << fixed(t.exposed() * 1e3, 1) << " (tp " << fixed(t.tp * 1e3, 1) << ", cp " << fixed(t.cp * 1e3, 1) << ", pp "
    << fixed(t.pp * 1e3, 1) << ", dp " << fixed(t.dp * 1e3, 1) << (c.llama.is_moe() ? ", ep " + fixed(t.ep * 1e3, 1) : "")
    << ") + bubble " << fixed(t.bubble * 1e3, 1) << (c.zero_offload ? " + offload " + fixed(t.offload * 1e3, 1) : "")
    << " | "
    << with_commas(int64_t(p.tokens_per_s_per_gpu)) << " tokens/s per GPU | MFU " << fixed(p.mfu * 100, 1) << "%";
  return o.str();
}

}  // namespace

// Why this cp mode: each mode's exposed cp time on this layout (layout_cost.h), e.g.
// "hybrid 2: cp communication exposed 9.54 ms (ring 43.08, ulysses 16.70, hybrid 4 14.32 ms)".
static std::string cp_mode_reason(const RunConfig& c, const Hardware& hw) {
  std::string others;
  for (const auto& [mode, u] : cp_modes(c.cp)) {
    RunConfig alt = c;
    alt.cp_mode = mode, alt.cp_ulysses = u;
    if (mode == c.cp_mode && u == c.cp_ulysses) continue;
    if (!check_flag_rules(alt, alt.dp * alt.tp * alt.pp * alt.cp).empty()) continue;
    others += std::string(others.empty() ? "" : ", ") + mode + (u ? " " + std::to_string(u) : "") + " " +
              fixed(predict_step(alt, hw, 0).cp * 1e3, 2);
  }
  return c.cp_mode + (c.cp_ulysses ? " " + std::to_string(c.cp_ulysses) : "") + ": cp communication exposed " +
         fixed(predict_step(c, hw, 0).cp * 1e3, 2) + " ms" + (others.empty() ? "" : " (" + others + " ms)");
}

// Why HSDP: its step against the same layout's with ZeRO over the whole cp x dp group, e.g.
// "hsdp: step 3460 ms (dp 114), 35.0 GB; with ZeRO over all 32 ranks of cp x dp: 8356 ms (dp 5009), 23.7 GB at
// micro-batch 1 x grad-acc 8".
static std::string hsdp_reason(const Candidate& c) {
  const Candidate& w = *c.whole_group;
  return "hsdp: step " + ms(c.time.total()) + " ms (dp " + ms(c.time.dp) + "), " + gb(c.peak_bytes) + "; with ZeRO over all " +
         std::to_string(c.cfg.dp * c.cfg.cp) + " ranks of cp x dp: " + ms(w.time.total()) + " ms (dp " + ms(w.time.dp) + "), " +
         gb(w.peak_bytes) + " at micro-batch " + std::to_string(w.cfg.micro_batch_size) + " x grad-acc " +
         std::to_string(w.cfg.grad_acc_steps);
}

std::string cheatsheet_rule(const Candidate& cand, const Hardware& hw) {
  const RunConfig& c = cand.cfg;
  const int n = c.dp * c.cp;
  std::vector<std::string> rules;
  const bool tp_in_node = c.tp > 1 && !tp_crosses_nodes(c, hw);
  if (c.dp * c.tp * c.pp * c.cp == 1) rules.push_back("one GPU");
  else if (c.tp == 1 && c.pp == 1 && c.cp == 1)
    rules.push_back(c.zero == 0   ? "fits on one GPU's memory with DP alone"
                    : c.zero == 3 ? "ZeRO-3 alone (DP with sharded parameters)"
                                  : "DP with ZeRO-" + std::to_string(c.zero) + " to fit the optimizer state");
  else if (c.tp > 1 && c.pp == 1 && c.cp == 1 && n == 1)
    rules.push_back(tp_in_node ? "TP alone, within the node" : "TP alone, across nodes");
  else {
    if (c.tp > 1) rules.push_back(tp_in_node ? "TP within the node" : "TP across nodes (slow links)");
    if (c.pp > 1) rules.push_back(pp_crosses_nodes(c, hw) ? "PP across nodes" : "PP");
    if (c.cp > 1)
      rules.push_back(c.cp_mode == "ring" ? "CP to split the sequence"
                                          : "CP (" + c.cp_mode + (c.cp_ulysses ? " " + std::to_string(c.cp_ulysses) : "") +
                                                ") to split the sequence");
    if (n > 1 && c.zero == 3) rules.push_back("ZeRO-3 to fit");
    else if (c.dp > 1) rules.push_back(c.zero > 0 ? "DP with ZeRO-" + std::to_string(c.zero) : "DP");
  }
  if (c.ep > 1) rules.push_back(std::string("EP: the experts over ") + std::to_string(c.ep) + " dp ranks" +
                                (ep_crosses_nodes(c, hw) ? " (all-to-all across nodes)" : " of a node"));
  if (c.zero_shard > 0)
    rules.push_back("HSDP: ZeRO inside the node (" + std::to_string(zero_shard_ranks(c)) + " ranks), replicated across nodes (" +
                    std::to_string(n / zero_shard_ranks(c)) + " copies)");
  if (c.zero_offload) rules.push_back("ZeRO-Offload: the optimizer state in CPU memory");
  if (fused_pieces(c).loss && !auto_means_fused(c))
    rules.push_back("fused kernels: the loss's logits a chunk at a time");
  if (c.recompute == "full" && c.grad_acc_steps > 1) rules.push_back("GPU-poor: full recompute + accumulation");
  else if (c.recompute != "none") rules.push_back(c.recompute + " recompute to fit");
  else if (c.grad_acc_steps > 1) rules.push_back("accumulation to reach the batch");
  std::string out;
  for (const auto& r : rules) out += (out.empty() ? "" : ", ") + r;
  return out;
}

std::string command_line(const Candidate& cand) {
  const RunConfig& c = cand.cfg;
  std::ostringstream o;
  o << "mpirun -np " << c.dp * c.tp * c.pp * c.cp << " build/train --device cuda --model " << c.model;
  for (const auto& [flag, value] : config_fields(c))  // the shape flags given on the command line
    for (const auto& given : c.shape_flags)
      if (given != "model" && flag == "--" + given) o << " " << flag << " " << value;
  o << " --dtype " << precision_name(c.dtype) << " --seq-len " << c.seq_len << " --micro-batch-size "
    << c.micro_batch_size << " --grad-acc-steps " << c.grad_acc_steps << " --dp " << c.dp;
  if (c.tp > 1) o << " --tp " << c.tp;
  if (c.sp) o << " --sp";
  if (c.pp > 1) o << " --pp " << c.pp << " --pp-schedule " << c.pp_schedule;
  if (c.pp_virtual_stages > 1) o << " --pp-virtual-stages " << c.pp_virtual_stages;
  if (c.cp > 1) o << " --cp " << c.cp;
  if (c.cp > 1 && c.cp_mode != "ring") o << " --cp-mode " << c.cp_mode;
  if (c.cp_ulysses > 0) o << " --cp-ulysses " << c.cp_ulysses;
  if (c.ep > 1) o << " --ep " << c.ep;
  if (c.zero > 0) o << " --zero " << c.zero;
  if (c.zero_shard > 0) o << " --zero-shard " << c.zero_shard;
  if (c.zero_hpz > 0) o << " --zero-hpz " << c.zero_hpz;
  if (c.zero_offload) o << " --zero-offload";
  if (c.recompute != "none") o << " --recompute " << c.recompute;
  // The kernels, named whenever fused (and aten where --kernels auto would pick fused).
  if (fused_pieces(c).on) o << " --kernels fused";
  else if (auto_means_fused(c)) o << " --kernels aten";
  return o.str();
}

std::string layout_search_text(const RunConfig& given, const ShardPlanFor& shard_plan_for) {
  if (given.planner.layout_only) return layout_prediction_text(given, shard_plan_for);
  RunConfig base = given;
  if (!base.dtype_given) base.dtype = Precision::kBF16;  // the GPU default
  // The run's default sequence (128) is a CPU demo's; a plan is for GPUs: the Playbook's
  // benchmark length unless --seq-len says otherwise.
  if (!base.seq_len_given) base.seq_len = std::min<int64_t>(4096, base.llama.max_position_embeddings);
  const Hardware hw = hardware_of(base.planner);
  std::ostringstream o;
  o << "plan: " << base.model << " (" << with_commas(count_parameters(base.llama)) << " parameters), " << base.planner.gpus
    << " GPU(s), " << base.planner.gpus_per_node << " per node, " << fixed(base.planner.gpu_memory_gb, 0) << " GB each, "
    << precision_name(base.dtype) << ", --seq-len " << base.seq_len << (given.seq_len_given ? "" : " (a plan's default)")
    << ", global batch >= "
    << with_commas(base.planner.global_batch_tokens) << " tokens\n";
  o << "  cost model: " << fixed(base.planner.peak_tflops, 0) << " TFLOP/s peak at <= " << fixed(kMaxEfficiency * 100, 0)
    << "% efficiency; links " << fixed(base.planner.intra_node_gbps, 0) << " GB/s in a node, " << fixed(base.planner.inter_node_gbps, 0)
    << " GB/s between nodes; offload: PCIe " << fixed(kPcieBytesPerS / 1e9, 0) << " GB/s, CPU AdamW "
    << general(kCpuAdamWElementsPerS / 1e9) << " G elements/s (docs/planner.md)\n";
  const LayoutSearch r = search_layouts(base, base.planner.gpus, shard_plan_for, base.planner.top);
  o << "  considered " << with_commas(r.considered) << " layouts: " << with_commas(r.valid) << " pass the flag rules, "
    << with_commas(r.fit) << " fit in " << fixed(base.planner.gpu_memory_gb, 0) << " GB"
    << (r.larger_batch ? "; " + with_commas(r.larger_batch) + " of those that pass need a larger batch than asked "
                         "(their schedule's micro-batches), not ranked" : "") << "\n";
  o << "  searched in " << fixed(r.seconds, 2) << " s: " << with_commas(r.estimates) << " memory estimates (a layout's "
    << "pipeline stages) on " << with_commas(r.plans) << " shard plans, " << with_commas(r.fit) << " step times\n";
  if (!r.best.empty()) {
    o << "best " << r.best.size() << " by predicted tokens/s per GPU (each layout once, at its best micro-batch and "
      << "cp x dp split; within " << fixed(kTieBand * 100, 0) << "% of each other the simpler first):\n";
    for (size_t i = 0; i < r.best.size(); ++i) {
      const Candidate& c = r.best[i];
      const StepTime& t = c.time;
      o << " " << i + 1 << ". " << layout_text(c.cfg) << " = " << with_commas(int64_t(tokens_per_step(c.cfg)))
        << " tokens/step\n";
      o << "    memory " << gb(c.peak_bytes) << (c.cfg.pp > 1 ? " (stage " + std::to_string(c.worst_stage) + ")" : "")
        << " | step " << ms(t.total()) << " ms = compute " << ms(t.compute) << " + communication " << ms(t.exposed())
        << " (tp " << ms(t.tp) << ", cp " << ms(t.cp) << ", pp " << ms(t.pp) << ", dp " << ms(t.dp)
        << (c.cfg.llama.is_moe() ? ", ep " + ms(t.ep) : "") << ") + bubble "
        << ms(t.bubble) << (c.cfg.zero_offload ? " + offload " + ms(t.offload) : "") << " | "
        << with_commas(int64_t(c.tokens_per_s_per_gpu)) << " tokens/s per GPU | MFU " << fixed(c.mfu * 100, 1) << "%\n";
      o << "    rule: " << cheatsheet_rule(c, hw) << "\n";
      if (c.cfg.cp > 1) o << "    cp mode: " << cp_mode_reason(c.cfg, hw) << "\n";
      if (c.whole_group) o << "    " << hsdp_reason(c) << "\n";
      o << "    " << command_line(c) << "\n";
    }
  } else {
    o << "nothing fits: ";
    if (r.valid == 0) {
      o << "no layout of " << base.planner.gpus << " GPU(s) passes the flag rules for this model and sequence\n";
    } else {
      o << "the least any layout needs is " << gb(r.least_peak_bytes) << " per GPU, above --gpu-memory "
        << fixed(base.planner.gpu_memory_gb, 0) << "\n";
    }
    const WhatWouldFit w = what_would_fit(base, r, shard_plan_for);
    o << "what would fit (the same search again):\n";
    if (w.gpus > 0) {
      RunConfig more = base;
      more.planner.gpus = w.gpus;
      const LayoutSearch at = search_layouts(more, w.gpus, shard_plan_for, 1);
      o << "  more GPUs: --gpus " << w.gpus << " (the smallest power of two x " << base.planner.gpus << "), best "
        << layout_text(at.best[0].cfg) << ", " << gb(at.best[0].peak_bytes) << "\n";
    } else {
      o << "  more GPUs: none up to 4096\n";
    }
    if (w.memory_bytes > 0)
      o << "  more memory: a GPU of " << gb(w.memory_bytes) << " (--gpu-memory " << fixed(w.memory_bytes / 1e9 + 0.05, 1)
        << ") at " << base.planner.gpus << " GPU(s)\n";
    if (w.seq_len > 0) o << "  a shorter sequence: --seq-len " << w.seq_len << " at " << base.planner.gpus << " GPU(s)\n";
    else o << "  a shorter sequence: none down to 64 tokens\n";
  }
  std::string s = o.str();
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace picotron
