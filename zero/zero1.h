// zero/zero1.h — ZeRO-1 (Rajbhandari et al., arXiv 1910.02054, section 5.1): each of the
// N ranks of the cp×dp group keeps the optimizer state of a 1/N slice of the parameters.
//
// Plain data parallelism keeps, on every rank, the same fp32 master weights and the same
// two AdamW moments, and every rank runs the same update. ZeRO-1 lays this rank's
// parameters end to end in buckets (zero/zero_layout.h), pads each bucket to a multiple
// of N and gives rank r the r-th 1/N of each (the buffers: zero/zero_shard.h). Rank r
// keeps master weights and moments for its slice only, and updates only its slice:
//
//   backward:    every rank accumulates the FULL fp32 gradient of its micro-batches
//   sync:        reduce-scatter(avg)  [padded] -> [padded / N]: the averaged gradient of my part
//   norm:        squares of my slice (each element counted once), all-reduced over the world
//   step:        AdamW on my slice of master, m, v                      [P_pad / N]
//   all-gather:  my updated part -> every rank's bucket parameters      [padded]
//
// A reduce-scatter followed by an all-gather moves exactly what one all-reduce moves (the
// ring all-reduce IS those two), so stage 1 costs no extra communication and saves
// 2 x 4 bytes (moments) + 4 bytes (master, for bf16) per parameter, times (N-1)/N.
// Parameters straddle slice boundaries freely: the slice is elementwise, AdamW is
// elementwise, and the weight-decay and norm-counting rules become per-element runs.
//
// Test: build/tests/unit_tests "[zero]"; ctest -L zero
#pragma once

#include "zero/zero_shard.h"
#include "zero/zero_state.h"

namespace picotron {

class Zero1Optimizer : public ZeroOptimizer {
 public:
  // `groups`: the group the slices are spread over (cp×dp; with --zero-shard, its shard
  // group, the slices replicated over the rest: zero/zero_groups.h). `here`: this rank's
  // coordinates (which copies count in the norm). `bucket_mb`: the buckets' size.
  // `offload`: master and moments in CPU memory (zero/zero_shard.h).
  Zero1Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                 bool offload = false);

  void zero_main_grads() override;
  void accumulate_grads() override;  // main_grad += grad (bf16/fp16; fp32 accumulates in place)
  // The registered sums on the full gradient, then reduce-scatter(avg) it into my slice,
  // bucket by bucket (HSDP: then averaged over the replicas).
  void sync_grads() override;
  double grad_norm(Comm& world, const MeshCoords&) override { return shard_.grad_norm(world); }
  // AdamW on my slice from grad_scale * gradient, then every rank's parts to every rank.
  void step(double lr, double grad_scale) override;
  OptimizerState* state() override { return &state_; }
  ZeroShard& shard() override { return shard_; }

 private:
  ZeroShard shard_;        // the buckets, my slice, its AdamW
  torch::Tensor flat_grad_;  // [P_pad] fp32 (fp64): the full accumulated gradient; params' main_grads are views
  ZeroState state_{shard_, 1};
};

}  // namespace picotron
