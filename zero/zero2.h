// zero/zero2.h — ZeRO-2 (arXiv 1910.02054, section 5.2): ZeRO-1 that never keeps the full
// gradient either.
//
// During each micro-batch's backward a hook copies every gradient into its bucket and
// frees it; a complete bucket is reduce-scattered at once (overlapping the rest of
// backward: data parallelism's bucket mechanism, picotron/grad_buckets.h), and only
// my part of it is added into my slice:
//
//   backward (last layer first):  grad -> bucket k [padded] ; bucket k complete:
//                                 reduce-scatter(avg) [padded] -> [padded / N] (async)
//   at most two buckets in flight: the oldest is waited for and added into my slice
//   step:                         as ZeRO-1 (zero/zero1.h): AdamW on my slice, all-gather
//
// The full gradient never exists. The price: with grad accumulation the gradients travel
// every micro-batch (m reduce-scatters instead of one).
//
// The sums other techniques make over their own axes (sequence parallelism's norm gains
// over tp, a pipeline's tied embedding over its first and last stage) commute with the
// cp×dp average, so they run on my slice instead of a full gradient (sync_grads):
//
//   tp rank 0, dp rank r:  my piece of gamma's averaged gradient ─┐ all-reduce(sum) over tp
//   tp rank 1, dp rank r:  the same piece (same layout)          ─┘ = the full batch's piece
//
// That needs the ranks of such a group to own the same piece: tp shards are equal, so
// their layouts are; in a pipeline the embedding gets a bucket of its own, which the
// first and last stage then cut alike.
//
// SlicedGradients is that gradient path; ZeRO-3 (zero/zero3.h) owns one too.
//
// Test: ctest -L zero
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "picotron/grad_buckets.h"
#include "zero/zero_shard.h"
#include "zero/zero_state.h"

namespace picotron {

// The gradients of a micro-batch, bucket by bucket, reduce-scattered into my slice
// (shard.grad) as backward completes each bucket.
class SlicedGradients {
 public:
  // `on_complete(b)`: bucket b's gradients all arrived (ZeRO-3 releases its parameters).
  explicit SlicedGradients(ZeroShard& shard, std::function<void(size_t bucket)> on_complete = {});
  // Before each micro-batch's backward: every bucket waits for all its gradients again.
  void arm() { buckets_->arm(); }
  // After it: the buckets still pending go, and all are added into my slice. A gradient
  // written after its hook ran (zb-h1's deferred weight gradients, which W computes after
  // B: pipeline_parallel/zero_bubble.h) goes into its bucket here, and the buckets travel
  // again: under zb-h1 after every B and every W.
  void finish_micro_batch();
  // Runs `sums` with each parameter's main_grad my piece of its averaged gradient,
  // flattened ([piece], empty when I own none of it); afterwards no main_grad, as before.
  void with_my_pieces(const std::function<void(std::vector<TrainableParam>&)>& sums);

 private:
  size_t layout_bucket(size_t k) const { return shard_.layout.buckets.size() - 1 - k; }  // k-th to launch
  void take(size_t param);            // the hook: the gradient into its bucket
  Work launch(size_t k);              // bucket k's reduce-scatter
  void add_into_slice(size_t k);      // its average of my part, into my slice

  ZeroShard& shard_;
  std::vector<torch::Tensor> full_;   // per bucket [padded] fp32: the micro-batch's gradients of the bucket
  std::vector<torch::Tensor> mine_;   // per bucket [padded / N]: the reduce-scattered average of my part
  std::unique_ptr<GradBuckets> buckets_;  // launch order: the LAST bucket first (backward's order)
};

class Zero2Optimizer : public ZeroOptimizer {
 public:
  Zero2Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                 bool offload = false);

  void zero_main_grads() override { shard_.grad.zero_(); }
  void prepare_backward(bool) override { grads_.arm(); }
  void accumulate_grads() override { grads_.finish_micro_batch(); }
  // Nothing left to reduce (done during backward); HSDP's average over the replicas, then
  // the registered sums on my pieces.
  void sync_grads() override;
  double grad_norm(Comm& world, const MeshCoords&) override { return shard_.grad_norm(world); }
  void step(double lr, double grad_scale) override;  // as ZeRO-1: AdamW on my slice, all-gather
  OptimizerState* state() override { return &state_; }
  ZeroShard& shard() override { return shard_; }

 private:
  ZeroShard shard_;
  SlicedGradients grads_{shard_};
  ZeroState state_{shard_, 2};
};

// Stage 2's unit ids (ZeroShard::Options::units) for `named_params`: the embedding in a
// bucket of its own when this rank is a pipeline's end, so both ends cut it alike.
std::vector<int> embedding_alone(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                                 const ShardPlan& plan, const MeshCoords& here);

}  // namespace picotron
