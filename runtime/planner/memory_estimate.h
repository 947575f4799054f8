// runtime/planner/memory_estimate.h — what one rank's training step will hold at its peak,
// predicted from the flags alone (--dry-run prints it): parameters, gradients, master
// weights, AdamW moments, the activations that forward keeps for backward, and the
// temporaries of the backward at its peak, each with its formula.
//
// The activation formulas are derived tensor by tensor from model.cpp in
// docs/memory.md ("Where the memory goes"); tests/scripts/check_memory_estimate.sh runs
// real steps and checks the prediction against the measured peak (the CPU counting
// allocator, runtime/observe/measure.h) within 10%.
//
// What one token keeps per layer and at the head, with ATen's ops or with --kernels fused
// (whose norms, SwiGLU and chunked loss keep less), is memory_per_token.h's.
//
// Under HSDP (--zero-shard) the slices are 1/(cp x --zero-shard) of the state instead of
// 1/(cp x dp); under hpZ (--zero-hpz h, zero/zero_groups.h) every unit whose forward has
// run keeps its 1/(h x cp) part of the full parameters until its backward, all of them at
// the backward's start: about P_pad/(h x cp) more in the compute dtype (the last pass's
// units, kept whole from forward into backward, aside).
//
// A mixture of experts (expert_parallel/moe.h) counts its block as autograd keeps it: the router's
// probabilities and top-k, every (token, slot) pair's rows through its expert, and under
// --ep the all-to-all buffers. Routing is assumed balanced: the experts of a rank get k.T
// rows per micro-batch (a rank whose experts are popular holds more).
//
// Test: ctest -R memory_estimate
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/cli/train_config.h"
#include "picotron/shard.h"

namespace picotron {

struct MemoryLine {
  std::string name;     // "weights", "activations kept", ...
  double bytes = 0;
  std::string formula;  // how the bytes follow from the shapes, e.g. "P x e = 820,352 x 4"
};

struct MemoryEstimate {
  std::vector<MemoryLine> state;  // held for the whole step
  MemoryLine activations;         // kept by the forwards in flight, freed by their backwards
  MemoryLine transient;           // the extra at the backward's peak moment
  MemoryLine hpz_parts;           // --zero-hpz: each unit's 1/H part, kept from its forward to its backward (0 without)
  std::vector<std::string> terms; // the per-token terms the formulas use, explained
  double state_bytes() const;
  double peak_bytes() const;      // state + activations + hpZ's parts + transient
};

// What the rank's parameters come to under ZeRO's layout, in elements: all the estimate
// reads of the shard plan. ZeRO's slices are over its shard group, N = cp x dp ranks, or
// N = cp x --zero-shard under HSDP (zero/zero_groups.h: the other groups hold copies of the
// same slices). It follows from the plan, the ZeRO stage, N, --zero-hpz, --ep
// and the bucket size only, not from the micro-batch, the recompute mode or the schedule:
// the planner (layout_search.cpp) works it out once per shape and reuses it for every micro-batch.
// (Walking the plan's names is most of an estimate's cost: hundreds of string lookups.)
struct ParameterCounts {
  bool has_embed = false, has_head = false, tied_here = false;  // which ends of the model the rank holds
  bool zero_buckets = false;     // some parameters in ZeRO's layout (not the experts alone)
  bool experts_apart = false;    // --ep under ZeRO: the experts sliced over their replicas
  double P = 0, shard = 0;       // parameters held; my ZeRO slice (P_pad/N, + the experts' P_pad/(N/ep))
  double hpz_parts = 0;          // ZeRO-3 --zero-hpz h: the units' parts kept from forward to backward,
                                 // (P_pad - the last pass's units)/(h x cp) (+ the experts' P_pad/(h x cp/ep))
  double head_unit = 0;          // ZeRO-3: the head's unit (and a tied embedding's), padded
  double touched_buckets = 0;    // ZeRO >= 2: the buckets the head and the newest layer's down projection reach, padded
  double layer_unit = 0;         // ZeRO-3: the largest layer unit, padded
};
ParameterCounts parameter_counts(const TrainConfig& c, const MeshCoords& here, const ShardPlan& plan);
// The plan's parameters in the model's order, with what ZeRO's layout asks of their names:
// walked once per shard plan (by the planner), laid out for each ZeRO stage and cp x dp.
struct HeldParameter {
  static constexpr int kEmbedding = -2, kHead = -1;
  int64_t numel = 0;          // this rank's elements of it
  bool expert = false;        // an --ep expert (its dp replicas every dp_stride-th rank)
  int unit = kHead;           // ZeRO-3's unit (zero3_unit): its layer, kEmbedding or kHead (final norm, lm_head)
  bool norm_or_head = false;  // model.norm.weight, lm_head.weight
  bool down_proj = false;     // its layer's mlp.down_proj.weight
};
struct HeldParameters {
  bool has_embed = false, has_head = false, tied_here = false;
  bool pipeline_end = false;  // is_pipeline_end (picotron/shard.h)
  std::vector<HeldParameter> params;
};
HeldParameters held_parameters(const TrainConfig& c, const MeshCoords& here, const ShardPlan& plan);
ParameterCounts parameter_counts(const TrainConfig& c, const HeldParameters& held);

// The estimate for the rank at `here` (its shard plan `plan`), with the micro-batch,
// sequence, dtype, recompute, kernels, mesh and ZeRO stage of `c`. Pure arithmetic.
MemoryEstimate estimate_memory(const TrainConfig& c, const MeshCoords& here, const ShardPlan& plan);
// The same from the plan's counts (parameter_counts of the same c's shape and plan).
MemoryEstimate estimate_memory(const TrainConfig& c, const MeshCoords& here, const ParameterCounts& counts);

// The --dry-run text: rank 0's lines with formulas, then the peak of each distinct rank.
std::string memory_summary(const TrainConfig& c, const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of);

}  // namespace picotron
