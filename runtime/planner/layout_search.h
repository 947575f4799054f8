// runtime/planner/layout_search.h — `build/train --plan`: the Ultra-Scale Playbook's cheatsheet as
// a search. For --gpus N it enumerates every layout
//
//   dp x tp x pp x cp = N, --sp (with tp), --zero 0-3 (with cp x dp > 1), --zero-offload
//   (with --zero >= 1; at cp x dp = 1 ZeRO only so), where ZeRO's cp x dp group crosses nodes
//   also HSDP with the shard group inside a node (--zero-shard: the dp ranks of one node,
//   tried beside each such layout that fits; zero/zero_groups.h), --recompute none/selective/full,
//   --kernels aten | fused (both unless --kernels names one; what fused keeps:
//   memory_per_token.h), the pipeline schedule (afab, 1f1b, interleaved v = 2 or 4, zb-h1),
//   for a mixture of experts --ep (each divisor of dp that divides E; the all-to-alls in
//   layout_cost.h), with cp > 1 the fastest --cp-mode by the cost model (ring, ulysses, hybrid
//   with each --cp-ulysses the heads allow: the same memory), the micro-batch (1, 2, 4, ...) and the grad-acc that reaches
//   --global-batch-tokens (the smallest not below; interleaved needs m % P == 0, zb-h1
//   m >= P: rounded up)
//
// keeps those check_flag_rules() accepts (runtime/cli/flag_rules.cpp: the same rules a run is
// held to), predicts each one's peak memory with estimate_memory() for every pipeline
// stage (the stages are the distinct roles: tp, cp and dp ranks of a stage hold equal
// shares) and keeps those whose worst stage fits --gpu-memory, predicts their step time
// (runtime/planner/layout_cost.h) and ranks them by tokens/s per GPU (within kTieBand of
// each other, the simpler first).
//
// The cheatsheet it reproduces (Playbook, "A cheatsheet"): (1) fit the model: small models
// one technique over a node (TP, or DP/ZeRO-3 with recompute), 10B+ TP in the node with PP
// or ZeRO-3 across nodes, GPU-poor full recompute and accumulation; (2) reach the global
// batch with DP, CP and accumulation; (3) throughput: TP up to the node, DP with ZeRO,
// PP when DP's communication becomes the bottleneck, tune the micro-batch.
//
// Pure: no communication, no tensor; the shard plans come from `shard_plan_for` (train.cpp's).
//
// Test: build/tests/unit_tests "[plan]"; ctest -R cli.plan
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cli/run_config.h"
#include "runtime/planner/layout_cost.h"
#include "picotron/shard.h"

namespace picotron {

// What a rank holds under a layout (train.cpp's shard_plan_for).
using ShardPlanFor = std::function<ShardPlan(const TrainConfig&, const MeshCoords&)>;

struct Candidate {
  RunConfig cfg;         // the layout: mesh, sp, zero (offload), recompute, kernels, schedule, micro-batch, grad-acc
  double peak_bytes = 0;   // predicted peak of the worst pipeline stage
  int worst_stage = 0;
  std::vector<double> stage_peak_bytes;  // every stage's predicted peak (evaluate_layout; the search stops early)
  StepTime time;
  // HSDP (cfg.zero_shard > 0, search_layouts' best only): the fastest of the same layout with
  // ZeRO over the whole cp x dp group, for the report's comparison
  std::shared_ptr<Candidate> whole_group;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;          // model FLOPs (no recompute) / peak, as the step line's
  int band = 0;            // how many kTieBand below the fastest layout's tokens/s
};

// Layouts whose predictions differ by less than this fraction are a tie for the cost
// model (layout_cost.h: its constants are not that accurate): the simpler one ranks first.
constexpr double kTieBand = 0.05;
// The simplicity order within a band, the cheatsheet's: fewer parallel axes (DP and TP
// before PP and CP, which are for big models and long sequences), a lower ZeRO stage, ZeRO
// over the whole group before HSDP, less recompute, 1f1b, no --sp, the kernels --kernels auto picks, no offload.
int complexity(const RunConfig& c);

// The --ep sizes the search tries at `dp` data-parallel ranks: {1}, and for a mixture of
// experts every divisor of dp that divides E (check_flag_rules() then judges each layout).
std::vector<int> expert_parallel_sizes(const LlamaConfig& m, int dp);

// The --cp-mode (and --cp-ulysses) the search tries at `cp` ranks: ring, ulysses, and the
// hybrid with every all-to-all group 1 < U < cp dividing cp (check_flag_rules() judges the heads).
std::vector<std::pair<std::string, int>> cp_modes(int cp);

struct LayoutSearch {
  int gpus = 0;
  int64_t considered = 0;  // layouts enumerated
  int64_t valid = 0;       // accepted by check_flag_rules()
  int64_t larger_batch = 0;  // valid, but the schedule needs more micro-batches than the asked batch has
                             // (interleaved m % P, zb-h1 m >= P, dualpipev m >= 2P): not ranked
  int64_t fit = 0;         // predicted peak <= --gpu-memory
  double least_peak_bytes = 0;  // the smallest predicted peak of a valid layout (0: none valid)
  int64_t estimates = 0;   // memory estimates made, one per pipeline stage of a layout
  int64_t plans = 0;       // shard plans derived: one per (tp, pp, v, ep, stage) shape
  double seconds = 0;      // the search's wall time
  std::vector<Candidate> best;  // the top ones, best first, one per layout (its best micro-batch)
};

// The search for `gpus` GPUs, model and sequence of `base`, hardware of hardware_of(base.planner).
LayoutSearch search_layouts(const RunConfig& base, int gpus, const ShardPlanFor& shard_plan_for, int top);

// One given layout, as the search costs it (--plan-layout): the layout of `c` as it stands
// (mesh, sp, ZeRO, recompute, schedule, micro-batch, grad-acc, dtype, device), every
// pipeline stage's peak, the step time. No check_flag_rules(), no --gpu-memory check: the caller's.
Candidate evaluate_layout(const RunConfig& c, const ShardPlanFor& shard_plan_for);

// What would fit when nothing does, each found by the same search: the smallest power of
// two times --gpus, the memory (least_peak_bytes), a shorter sequence.
struct WhatWouldFit {
  int gpus = 0;             // 0: none up to the limit tried
  double memory_bytes = 0;  // a GPU this big fits the best layout at --gpus
  int64_t seq_len = 0;      // 0: no shorter sequence fits either
};
WhatWouldFit what_would_fit(const RunConfig& base, const LayoutSearch& at_n, const ShardPlanFor& shard_plan_for);

// The cheatsheet rule a layout follows, e.g. "TP within the node, PP across nodes".
std::string cheatsheet_rule(const Candidate& c, const Hardware& hw);
// `mpirun -np N build/train --device cuda ...` with every flag the layout needs.
std::string command_line(const Candidate& c);
// The --plan text: the search's counts, the top layouts, or what would fit; under
// --plan-layout the prediction of the given layout alone (evaluate_layout).
std::string layout_search_text(const RunConfig& base, const ShardPlanFor& shard_plan_for);

}  // namespace picotron
