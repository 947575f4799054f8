// zero/zero2.h — ZeRO-2 (arXiv 1910.02054, section 5.2): ZeRO-1 that never keeps the full
// gradient either.
//
// During each micro-batch's backward a hook copies every gradient into its bucket and
// frees it; a complete bucket is reduce-scattered at once (overlapping the rest of
// backward, as data_parallel/ does with all-reduce), and only my part of it is added
// into my slice:
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
// Test: ctest -R "zero|data_parallel.overlap"
#pragma once

#include <deque>
#include <optional>

#include "picotron/optim.h"
#include "zero/zero1.h"

namespace picotron {

class Zero2Optimizer : public Zero1Optimizer {
 public:
  Zero2Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                 bool offload = false)
      : Zero2Optimizer(std::move(groups), named_params, opts, plan, here, bucket_mb, offload, /*stage=*/2,
                       embedding_alone(named_params, plan, here)) {}

  // Stage 2 keeps no full gradient: params()' main_grad is undefined (but in sync_grads).
  void prepare_backward(bool last_micro_batch) override { rearm(); }
  // Wait for this micro-batch's bucket reduce-scatters and add them into my slice. A
  // gradient written after its hook ran (zb-h1's deferred weight gradients, which W
  // computes after B: pipeline_parallel/zero_bubble.h) goes into its bucket here, and the
  // buckets travel again: under zb-h1 after every B and every W.
  void accumulate_grads() override;
  // Nothing left to reduce (done during backward). fix_ups run on my slice: while they
  // run, each parameter's main_grad is my piece of its averaged gradient, flattened
  // ([piece], empty when I own none of it).
  void sync_grads() override;

 protected:
  Zero2Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb, bool offload,
                 int stage, const std::vector<int>& units);
  // Every bucket of the next backward waits for all its gradients again.
  void rearm();
  // A bucket's gradients all arrived (stage 3 releases its parameters here).
  virtual void on_bucket_complete(size_t bucket) {}
  // Unit ids that give the embedding a bucket of its own when this rank is in a pipeline
  // (its first stage, or the last one's copy of a tied embedding); otherwise none.
  static std::vector<int> embedding_alone(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                                          const ShardPlan& plan, const MeshCoords& here);

 private:
  void on_grad_ready(size_t param);   // the hook: the gradient into its bucket
  void launch_ready_buckets();        // in descending bucket order, the same on every rank
  void finish_oldest();               // wait for the oldest launched bucket, add it into my slice

  // Per bucket, this micro-batch's gradients and their reduce-scatter in flight.
  struct InFlight {
    torch::Tensor full;   // [bucket padded] fp32: the micro-batch's gradients of the bucket
    torch::Tensor mine;   // [bucket padded / N] the reduce-scattered average of my part
    std::optional<Work> work;
    int pending = 0;      // gradients still to arrive
  };
  std::vector<InFlight> inflight_;
  std::vector<size_t> bucket_of_;
  int next_to_launch_ = -1;      // buckets launch last to first (backward's order)
  std::deque<size_t> launched_;  // launched, not yet added into my slice (at most 2)
  std::vector<GradReadyHook> hooks_;  // one per parameter (picotron/optim.h)
};

}  // namespace picotron
