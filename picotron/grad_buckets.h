// picotron/grad_buckets.h — gradients gathered into buckets as backward produces them,
// each bucket's collective launched the moment it is complete: the mechanism bucketed data
// parallelism (an all-reduce per bucket, data_parallel.h) and ZeRO-2/3 (a reduce-scatter
// per bucket, zero/zero2.h) share.
//
//   backward:  param i's gradient written ─► hook: take(i) ; bucket of i: one fewer pending
//              bucket k complete, and every bucket before k launched ─► launch(k) (async)
//   flush():   buckets still pending (a parameter got no gradient) launched; all waited for
//
// Buckets launch in index order 0, 1, 2, ... on every rank: collectives must be issued in
// the same order everywhere, and backward completes the buckets in (almost) that order
// when bucket 0 holds the LAST parameters. `max_in_flight` bounds what is in flight: the
// oldest is waited for (and done(k) called) before another goes.
//
// Test: ctest -R "data_parallel|zero2"
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/optim.h"

namespace picotron {

// Calls on_ready() right after autograd has written `param`'s gradient in a backward:
// a post hook on the parameter's gradient accumulator (the autograd node that writes
// param.grad). The hook is removed when this object goes.
class GradReadyHook {
 public:
  GradReadyHook(const torch::Tensor& param, const std::string& name, std::function<void()> on_ready);
  GradReadyHook(GradReadyHook&& other) noexcept : node_(std::move(other.node_)), key_(other.key_) {}
  GradReadyHook(const GradReadyHook&) = delete;
  GradReadyHook& operator=(const GradReadyHook&) = delete;
  GradReadyHook& operator=(GradReadyHook&&) = delete;
  ~GradReadyHook();

 private:
  std::shared_ptr<torch::autograd::Node> node_;  // kept alive: the parameter holds it only weakly
  uintptr_t key_ = 0;
};

class GradBuckets {
 public:
  struct Calls {
    std::function<void(size_t param)> take;    // param's gradient is complete: into its bucket
    std::function<Work(size_t bucket)> launch; // the bucket's collective, asynchronous
    std::function<void(size_t bucket)> done;   // its collective finished (optional)
    std::function<void(size_t bucket)> complete;  // its last gradient arrived (optional; ZeRO-3 releases)
  };
  // `bucket_of[i]`: parameter i's bucket (0 launches first). 0 max_in_flight: no bound.
  GradBuckets(const std::vector<TrainableParam>& params, std::vector<size_t> bucket_of, Calls calls,
              int max_in_flight = 0);
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Before each backward: every bucket waits for all its gradients again. `launch` false
  // (gradient accumulation's no-sync micro-batches): gradients are taken, nothing sent.
  void arm(bool launch = true);
  // After backward: the buckets not yet launched go (a parameter without a gradient leaves
  // its bucket pending), then every one is waited for.
  void flush();
  // Bucket k's collective is launched (a gradient written now would miss it).
  bool launched(size_t bucket) const { return bucket < next_; }
  size_t bucket_of(size_t param) const { return bucket_of_[param]; }

 private:
  void on_grad_ready(size_t param);  // the hook
  void launch_ready();               // in index order: every rank launches the same sequence
  void finish_oldest();

  const std::vector<TrainableParam>& params_;
  std::vector<size_t> bucket_of_;
  std::vector<int> size_, pending_;  // per bucket: its gradients, and those still to arrive
  std::vector<bool> arrived_;        // per parameter, in this backward
  Calls calls_;
  int max_in_flight_;
  bool launch_ = true;
  size_t next_ = 0;                  // the next bucket to launch
  std::deque<std::pair<size_t, Work>> in_flight_;
  std::vector<GradReadyHook> hooks_;  // one per parameter; removed first when this goes
};

}  // namespace picotron
