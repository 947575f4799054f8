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
// Test: ctest -R "zero|data_parallel.overlap"
#pragma once

#include <deque>
#include <optional>

#include "picotron/optim.h"
#include "zero/zero1.h"

namespace picotron {

class Zero2Optimizer : public Zero1Optimizer {
 public:
  Zero2Optimizer(Comm& group, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                 bool offload = false)
      : Zero2Optimizer(group, named_params, opts, plan, here, bucket_mb, offload, /*stage=*/2, /*units=*/{}) {}

  // Stage 2 keeps no full gradient: params()' main_grad is undefined.
  void prepare_backward(bool last_micro_batch) override { rearm(); }
  // Wait for this micro-batch's bucket reduce-scatters and add them into my slice.
  void accumulate_grads() override;
  // Nothing left to reduce (done during backward); fix_ups must be none (--zero 2 refuses
  // --sp and --pp, whose fix-ups need the full gradient).
  void sync_grads(const std::function<void()>& fix_ups) override;

 protected:
  Zero2Optimizer(Comm& group, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb, bool offload,
                 int stage, const std::vector<int>& units);
  // Every bucket of the next backward waits for all its gradients again.
  void rearm();
  // A bucket's gradients all arrived (stage 3 releases its parameters here).
  virtual void on_bucket_complete(size_t bucket) {}

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
