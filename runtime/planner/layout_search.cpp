// runtime/planner/layout_search.cpp — the search of layout_search.h: enumerate, check_flag_rules(), estimate_memory()
// for every pipeline stage, predict_step(), rank. The text, the rules and the command lines:
// layout_report.cpp.
#include "runtime/planner/layout_search.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "context_parallel/cp_layout.h"
#include "runtime/cli/flags.h"
#include "runtime/planner/memory_estimate.h"
#include "runtime/planner/memory_per_token.h"

namespace picotron {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

struct Schedule {
  const char* name;
  int v;
};
std::vector<Schedule> schedules_for(int pp) {
  if (pp == 1) return {{"1f1b", 1}};
  return {{"afab", 1}, {"1f1b", 1}, {"interleaved", 2}, {"interleaved", 4}, {"zb-h1", 1}, {"dualpipev", 2}};
}

// Micro-batches per step that reach `rows` sequences with B per micro-batch on dp ranks:
// the smallest not below, then what the schedule needs (interleaved m % P == 0, zb-h1 m >= P,
// dualpipev m >= 2P).
int64_t grad_acc_for(int64_t rows, int64_t B, int dp, const std::string& schedule, int pp) {
  int64_t m = std::max<int64_t>(1, (rows + B * dp - 1) / (B * dp));
  if (schedule == "interleaved") m = (m + pp - 1) / pp * pp;
  if (schedule == "zb-h1") m = std::max<int64_t>(m, pp);
  if (schedule == "dualpipev") m = std::max<int64_t>(m, 2 * int64_t(pp));
  return m;
}

// A pipeline stage's shape, worked out once and reused by every layout that shares it.
// Every layout with the same (tp, pp, v, the V or not, ep, stage) holds the same shard plan,
// whatever its dp, cp, ZeRO stage, recompute, schedule or micro-batch; with the same ZeRO
// stage and shard group (cp x dp, or cp x --zero-shard) also the same ParameterCounts
// (memory_estimate.h), the part of an estimate that walks the plan's hundreds of parameter
// names (most of its cost): the names are walked once per plan (HeldParameters), laid out
// once per (ZeRO stage, shard group, --zero-hpz). The search
// estimates each shape for every micro-batch, recompute mode, kernels and schedule: derived
// once here, each estimate is only the per-token arithmetic. (--dtype and --dp-bucket-mb,
// which the counts also read, are the same for the whole search.)
class StageShapes {
 public:
  explicit StageShapes(const ShardPlanFor& shard_plan_for) : shard_plan_for_(shard_plan_for) {}
  int64_t parameters(const RunConfig& c, int stage) { return shape(c, stage).parameters; }  // before ZeRO
  const ParameterCounts& counts(const RunConfig& c, int stage) {
    Shape& s = shape(c, stage);
    const auto key = std::make_tuple(c.zero, zero_shard_ranks(c), c.zero_hpz);
    auto it = s.counts.find(key);
    if (it == s.counts.end()) it = s.counts.emplace(key, parameter_counts(c, s.held)).first;
    return it->second;
  }
  int64_t plans_made() const { return int64_t(shapes_.size()); }

 private:
  struct Shape {
    HeldParameters held;                                      // the plan's parameters, in order (memory_estimate.h)
    int64_t parameters = 0;                                   // local_parameter_count(plan)
    std::map<std::tuple<int, int, int>, ParameterCounts> counts;  // by (ZeRO stage, shard group, hpZ)
  };
  Shape& shape(const RunConfig& c, int stage) {
    const auto key = std::make_tuple(c.tp, c.pp, c.pp_virtual_stages, c.pp_schedule == "dualpipev", c.ep, stage);
    auto it = shapes_.find(key);
    if (it == shapes_.end()) {
      Shape s;
      const ShardPlan plan = shard_plan_for_(c, MeshCoords{0, stage, 0, 0});
      s.held = held_parameters(c, MeshCoords{0, stage, 0, 0}, plan);
      s.parameters = local_parameter_count(plan);
      it = shapes_.emplace(key, std::move(s)).first;
    }
    return it->second;
  }
  const ShardPlanFor& shard_plan_for_;
  std::map<std::tuple<int, int, int, bool, int, int>, Shape> shapes_;
};

// The busiest pipeline rank's sends in a step (layout_cost.h), by (schedule, P, m, v): the
// step time of every layout that fits needs them, and counting them walks each rank's
// schedule, while a search meets only a few dozen such keys.
class PipelineSends {
 public:
  int64_t of(const RunConfig& c) {
    const auto key = std::make_tuple(c.pp_schedule, c.pp, c.grad_acc_steps, c.pp_virtual_stages);
    auto it = sends_.find(key);
    if (it == sends_.end()) it = sends_.emplace(key, busiest_pipeline_sends(c)).first;
    return it->second;
  }

 private:
  std::map<std::tuple<std::string, int, int64_t, int>, int64_t> sends_;
};

// Same layout but for the micro-batch, --sp (whose saving the estimate does not model), the
// kernels (the same time: layout_cost.h) and how the cp x dp group is split (CP's ring hides
// behind attention: the model predicts the same for cp 4 x dp 2 as for dp 8): the top list
// shows each once, its best (or simplest). HSDP's shard group by its ranks, cp x --zero-shard
// (the same 8 ranks of a node are --zero-shard 8 at cp 1, 2 at cp 4).
auto layout_key(const RunConfig& c) {
  return std::make_tuple(c.dp * c.cp, c.tp, c.pp, c.ep, c.zero, c.zero_shard > 0 ? zero_shard_ranks(c) : 0, c.zero_offload,
                         c.recompute, c.pp_schedule, c.pp_virtual_stages);
}

// The variants of a layout that change its memory but cannot make it faster, plainest
// first: the kernels --kernels auto picks on CUDA, then the other (the same time: layout_cost.h);
// then the optimizer offloaded (slower by its copies and CPU step), under ZeRO, or at cp x dp
// = 1 under ZeRO-1 or -2 (whose slice is then the whole optimizer). --kernels aten|fused keeps
// to the one named, --zero-offload to the offloaded.
struct Variant {
  std::string kernels;
  int zero;
  bool offload;
};
std::vector<Variant> variants_of(const RunConfig& base, const RunConfig& c, bool group) {
  std::vector<std::string> kernels{base.kernels};
  if (base.kernels == "auto") kernels = auto_means_fused(c) ? std::vector<std::string>{"fused", "aten"}
                                                            : std::vector<std::string>{"aten", "fused"};
  std::vector<Variant> out;
  for (const std::string& k : kernels)
    if (!base.zero_offload) out.push_back({k, c.zero, false});
  for (int zero : group ? std::vector<int>{c.zero} : std::vector<int>{1, 2})
    for (const std::string& k : kernels)
      if (zero > 0) out.push_back({k, zero, true});
  return out;
}

// The cp mode a layout runs fastest with (layout_cost.h; the memory is the same: ulysses.h):
// ring, ulysses, or the hybrid at each all-to-all group the heads allow, the ring on a tie.
void choose_cp_mode(RunConfig& c, const Hardware& hw, double params_per_gpu, int64_t pipeline_sends) {
  double best = 0;
  for (const auto& [mode, u] : cp_modes(c.cp)) {
    if (!cp_mode_problem(parse_cp_mode(mode), c.cp, u, c.llama.num_attention_heads / c.tp).empty()) continue;
    RunConfig alt = c;
    alt.cp_mode = mode, alt.cp_ulysses = u;
    const double t = predict_step(alt, hw, params_per_gpu, pipeline_sends).total();
    if (mode == "ring" || t < best * (1 - 1e-9)) best = t, c.cp_mode = mode, c.cp_ulysses = u;
  }
}

// The step time and what follows from it, for a layout whose memory is known (a searched
// layout: with the fastest cp mode). `pipeline_sends`: as predict_step's.
void predict_time(Candidate& cand, const Hardware& hw, double params_per_gpu, bool choose_mode = true,
                  int64_t pipeline_sends = -1) {
  if (choose_mode && cand.cfg.cp > 1) choose_cp_mode(cand.cfg, hw, params_per_gpu, pipeline_sends);
  const RunConfig& c = cand.cfg;
  cand.time = predict_step(c, hw, params_per_gpu, pipeline_sends);
  cand.tokens_per_s_per_gpu = tokens_per_step(c) / cand.time.total() / (c.dp * c.tp * c.pp * c.cp);
  cand.mfu = model_flops_per_token(c) * cand.tokens_per_s_per_gpu / hw.peak_flops;
}

}  // namespace

std::vector<int> expert_parallel_sizes(const LlamaConfig& m, int dp) {
  if (!m.is_moe()) return {1};
  std::vector<int> sizes;
  for (int ep : divisors(dp))
    if (m.num_local_experts % ep == 0) sizes.push_back(ep);
  return sizes;
}

std::vector<std::pair<std::string, int>> cp_modes(int cp) {
  if (cp == 1) return {{"ring", 0}};
  std::vector<std::pair<std::string, int>> modes{{"ring", 0}, {"ulysses", 0}};
  for (int u : divisors(cp))
    if (u > 1 && u < cp) modes.push_back({"hybrid", u});
  return modes;
}

int complexity(const RunConfig& c) {
  // PP for big models, CP for long sequences: each weighs more than a ZeRO stage and recompute
  // EP: one more group and its all-to-alls, for experts that do not fit or whose gradients cost
  // CP's modes: the ring first, then Ulysses (two all-to-alls, heads split), the hybrid last (both)
  const int cp_mode = c.cp_mode == "hybrid" ? 2 : c.cp_mode == "ulysses" ? 1 : 0;
  const int axes = 8 * (c.dp > 1) + 8 * (c.tp > 1) + 10 * (c.pp > 1) + 12 * (c.cp > 1) + cp_mode + 6 * (c.ep > 1);
  const int recompute = c.recompute == "full" ? 2 : c.recompute == "selective" ? 1 : 0;
  const int schedule = c.pp > 1 && c.pp_schedule != "1f1b" ? 1 : 0;
  // The kernels --kernels auto picks on CUDA before the others; offloading the optimizer
  // is one more moving part (its copies and CPU step are in the time already).
  const int kernels = fused_pieces(c).on != auto_means_fused(c) ? 1 : 0;
  // HSDP: two groups (the shard group and its replicas) where plain ZeRO has one
  return axes + c.zero + (c.zero_shard > 0) + recompute + schedule + c.sp + kernels + 2 * c.zero_offload;
}

namespace {

// Every layout of `gpus` GPUs the search walks: tp x pp x cp x dp = gpus, sp (with tp > 1),
// ZeRO 0-3 (where there is a cp x dp group to shard over: `group`), recompute, each
// schedule of pp, each ep dividing the experts. The cp mode is ring here: the fastest is
// chosen with the time (predict_time).
void for_each_layout(const RunConfig& base, int gpus, const std::function<void(const RunConfig&, bool group)>& visit) {
  for (int tp : divisors(gpus))
    for (int pp : divisors(gpus / tp))
      for (int cp : divisors(gpus / tp / pp))
        for (bool sp : {false, true}) {
          if (sp && tp == 1) continue;
          const bool group = gpus / tp / pp > 1;  // a cp x dp group for ZeRO to shard over
          for (int zero = 0; zero <= (group ? 3 : 0); ++zero)
            for (const char* recompute : {"none", "selective", "full"})
              for (const Schedule& s : schedules_for(pp))
                for (int ep : expert_parallel_sizes(base.llama, gpus / tp / pp / cp)) {
                  RunConfig c = base;
                  c.planner.search = false;
                  c.device = "cuda";
                  c.dp = gpus / tp / pp / cp, c.tp = tp, c.pp = pp, c.cp = cp, c.sp = sp, c.ep = ep;
                  c.zero = zero, c.recompute = recompute;
                  c.pp_schedule = s.name, c.pp_virtual_stages = s.v;
                  c.cp_mode = "ring", c.cp_ulysses = 0;
                  visit(c, group);
                }
        }
}

// The layouts that fit, best first into result.best (at most `top`, one per layout).
void rank_best(std::vector<Candidate>& fits, int top, LayoutSearch& result) {
  // Best first, in bands of kTieBand below the best (the cost model is not more accurate
  // than that): within a band the simpler layout first (the cheatsheet's order), then speed.
  double fastest = 0;
  for (const auto& cand : fits) fastest = std::max(fastest, cand.tokens_per_s_per_gpu);
  for (auto& cand : fits) cand.band = int((1 - cand.tokens_per_s_per_gpu / fastest) / kTieBand);
  std::stable_sort(fits.begin(), fits.end(), [](const Candidate& a, const Candidate& b) {
    if (a.band != b.band) return a.band < b.band;
    if (complexity(a.cfg) != complexity(b.cfg)) return complexity(a.cfg) < complexity(b.cfg);
    if (a.tokens_per_s_per_gpu != b.tokens_per_s_per_gpu) return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
    return a.peak_bytes < b.peak_bytes;
  });
  std::vector<decltype(layout_key(std::declval<RunConfig>()))> shown;
  for (const auto& cand : fits) {
    if (int(result.best.size()) >= top) break;
    const auto key = layout_key(cand.cfg);
    if (std::find(shown.begin(), shown.end(), key) != shown.end()) continue;
    shown.push_back(key);
    result.best.push_back(cand);  // (a copy: fits is read below)
  }
  // An HSDP layout shown beside the fastest of the same layout with ZeRO over the whole
  // cp x dp group (any micro-batch): the report says by how much the one beats the other.
  for (Candidate& hsdp : result.best) {
    if (hsdp.cfg.zero_shard == 0) continue;
    RunConfig same = hsdp.cfg;
    same.zero_shard = 0;
    const Candidate* whole = nullptr;
    for (const Candidate& c : fits)
      if (layout_key(c.cfg) == layout_key(same) && (!whole || c.tokens_per_s_per_gpu > whole->tokens_per_s_per_gpu)) whole = &c;
    if (whole) hsdp.whole_group = std::make_shared<Candidate>(*whole);  // (it fits wherever HSDP does: it holds less)
  }
}

}  // namespace

LayoutSearch search_layouts(const RunConfig& base, int gpus, const ShardPlanFor& shard_plan_for, int top) {
  const auto start = std::chrono::steady_clock::now();
  const Hardware hw = hardware_of(base.planner);
  LayoutSearch result;
  result.gpus = gpus;
  StageShapes shapes(shard_plan_for);
  PipelineSends pipeline_sends;
  const int64_t rows = std::max<int64_t>(1, (base.planner.global_batch_tokens + base.seq_len - 1) / base.seq_len);
  std::vector<Candidate> fits;
  // Every role's (pipeline stage's) peak into `cand`, the most parameters a stage holds into
  // `params`; stopped once it neither fits nor can be below `least` (negative: never; 0: as
  // soon as it does not fit). False if stopped.
  const auto estimate_stages = [&](const RunConfig& c, Candidate& cand, double& params, double least) {
    for (int stage = 0; stage < c.pp; ++stage) {
      if (cand.peak_bytes > hw.memory_bytes && least >= 0 && cand.peak_bytes >= least) return false;
      const double peak = estimate_memory(c, MeshCoords{0, stage, 0, 0}, shapes.counts(c, stage)).peak_bytes();
      ++result.estimates;
      if (peak > cand.peak_bytes) cand.peak_bytes = peak, cand.worst_stage = stage;
      params = std::max(params, double(shapes.parameters(c, stage)));
    }
    return true;
  };
  // HSDP (zero/zero_groups.h), beside a ZeRO layout `whole` that fits and whose cp x dp group
  // crosses nodes: the same layout with ZeRO's slices over the dp ranks of one node
  // (node_local_zero_shard), replicated across nodes. It holds more than `whole` (slices of
  // 1/(cp x those ranks)), so it is tried only where `whole` fits.
  const auto consider_hsdp = [&](RunConfig c) {
    c.zero_shard = c.zero > 0 ? node_local_zero_shard(c, hw) : 0;
    if (c.zero_shard == 0) return;
    ++result.considered;
    if (!check_flag_rules(c, gpus).empty()) return;  // e.g. --ep does not divide it
    ++result.valid;
    Candidate cand;
    double params = 0;
    if (!estimate_stages(c, cand, params, /*least=*/0) || cand.peak_bytes > hw.memory_bytes) return;
    ++result.fit;
    cand.cfg = c;
    predict_time(cand, hw, params, /*choose_mode=*/true, pipeline_sends.of(c));
    fits.push_back(std::move(cand));
  };
  // One layout: micro-batches of 1, 2, 4, ... sequences, while one step's rows do not
  // overshoot; at each, its variants in order until one fits (the later ones would rank
  // after it). Memory grows with the micro-batch: past one where none fits, none is estimated.
  const auto consider = [&](RunConfig c, const std::vector<Variant>& variants) {
    bool too_big = false;
    for (int64_t B = 1; B == 1 || B * c.dp <= rows; B *= 2) {
      bool estimated = false, fitted = false;
      for (const Variant& v : variants) {
        c.kernels = v.kernels, c.zero = v.zero, c.zero_offload = v.offload;
        c.micro_batch_size = B;
        c.grad_acc_steps = grad_acc_for(rows, B, c.dp, c.pp_schedule, c.pp);
        ++result.considered;
        if (!check_flag_rules(c, gpus).empty()) continue;
        ++result.valid;
        // The asked batch, or the nearest above it that micro-batches of B on dp ranks reach;
        // a schedule that needs more micro-batches runs another experiment: not ranked beside it.
        if (c.grad_acc_steps > grad_acc_for(rows, B, c.dp, "1f1b", c.pp)) {
          ++result.larger_batch;
          continue;
        }
        if (too_big || fitted) continue;
        Candidate cand;
        double params = 0;
        // Every role (pipeline stage); stop once it neither fits nor can be the least.
        const double least = result.least_peak_bytes;
        const bool exact = estimate_stages(c, cand, params, least > 0 ? least : -1);
        estimated = true;
        if (exact && (least == 0 || cand.peak_bytes < least)) result.least_peak_bytes = cand.peak_bytes;
        if (cand.peak_bytes > hw.memory_bytes) continue;
        ++result.fit;
        fitted = true;
        cand.cfg = c;
        predict_time(cand, hw, params, /*choose_mode=*/true, pipeline_sends.of(c));
        fits.push_back(std::move(cand));
        consider_hsdp(c);
      }
      if (estimated && !fitted) too_big = true;
    }
  };
  for_each_layout(base, gpus, [&](const RunConfig& c, bool group) { consider(c, variants_of(base, c, group)); });
  rank_best(fits, top, result);
  result.plans = shapes.plans_made();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Candidate evaluate_layout(const RunConfig& c, const ShardPlanFor& shard_plan_for) {
  Candidate cand;
  cand.cfg = c;
  double params = 0;
  for (int stage = 0; stage < c.pp; ++stage) {  // every role: tp, cp and dp ranks of a stage hold equal shares
    const ShardPlan plan = shard_plan_for(c, MeshCoords{0, stage, 0, 0});
    const double peak = estimate_memory(c, MeshCoords{0, stage, 0, 0}, plan).peak_bytes();
    cand.stage_peak_bytes.push_back(peak);
    if (peak > cand.peak_bytes) cand.peak_bytes = peak, cand.worst_stage = stage;
    params = std::max(params, double(local_parameter_count(plan)));
  }
  predict_time(cand, hardware_of(c.planner), params, /*choose_mode=*/false);  // the layout as given
  return cand;
}

WhatWouldFit what_would_fit(const RunConfig& base, const LayoutSearch& at_n, const ShardPlanFor& shard_plan_for) {
  WhatWouldFit w;
  w.memory_bytes = at_n.least_peak_bytes;
  for (int64_t n = int64_t(at_n.gpus) * 2; n <= 4096; n *= 2)  // more GPUs: the same search at 2N, 4N, ...
    if (search_layouts(base, int(n), shard_plan_for, 1).fit > 0) {
      w.gpus = int(n);
      break;
    }
  RunConfig shorter = base;  // a shorter sequence: halved until a layout fits (down to 64 tokens)
  for (shorter.seq_len = base.seq_len / 2; shorter.seq_len >= 64; shorter.seq_len /= 2)
    if (search_layouts(shorter, at_n.gpus, shard_plan_for, 1).fit > 0) {
      w.seq_len = shorter.seq_len;
      break;
    }
  return w;
}

}  // namespace picotron
