// data_parallel/data_parallel.h — data parallelism: every dp rank holds the whole model,
// trains on its own slice of the global batch, and the ranks average their gradients.
//
//   rank 0: batch rows [0, B)   --forward/backward-->  g0  ─┐
//   rank 1: batch rows [B, 2B)  --forward/backward-->  g1  ─┤-- all-reduce(avg) --> (g0+g1+...)/dp
//   ...                                                     ─┘    on every rank, so every rank
//                                                                 takes the same optimizer step
//
// The average of per-rank mean losses is the mean loss of the global batch (all micro-
// batches have the same number of tokens), so the averaged gradient is exactly the
// single-process gradient of the global batch: the equivalence contract.
//
// Two ways to synchronise (--dp-mode):
//   naive     after the last backward, one all-reduce per parameter. The network idles
//             during backward and the GPU idles during communication.
//   bucketed  gradients are packed into flat buckets of --dp-bucket-mb MiB, in reverse
//             order of the forward pass (the order backward produces them). A hook on
//             each parameter's gradient accumulator notices when its gradient is ready;
//             when a bucket is full its all-reduce is launched asynchronously (the
//             mechanism ZeRO-2 shares: picotron/grad_buckets.h), while
//             backward keeps computing the earlier layers' gradients. After backward we
//             only wait. Overlap pays when communicating one bucket takes no longer than
//             computing the next bucket's gradients (the Playbook's overlap condition),
//             and a few large all-reduces beat hundreds of small ones (latency). Cost:
//             the buckets are the main grads (views), so no extra memory beyond fp32 grads.
//
// Gradient accumulation: with --grad-acc-steps k, the first k-1 micro-batches only
// accumulate into the main grads (no-sync); the last one communicates.
//
// Communication per step: one all-reduce of all gradients, 2 (dp-1)/dp x N x 4 bytes
// sent and received per rank (fp32 main grads) with a ring algorithm.
//
// Test: ctest -R data_parallel ; equivalence: ctest -L equivalence
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "picotron/grad_buckets.h"
#include "picotron/comm.h"
#include "picotron/config.h"
#include "picotron/optim.h"

namespace picotron {

class DataParallel : public GradSync {
 public:
  // `group` is the data-parallel group: cp×dp (every rank there sees other tokens).
  // `params` must outlive this object; in bucketed mode their main grads are
  // replaced by views into the buckets.
  DataParallel(Comm& group, std::vector<TrainableParam>& params, DpMode mode, double bucket_mb);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Call before each micro-batch's backward. `sync`: it is the last micro-batch of the
  // step, so its gradients are communicated (otherwise they only accumulate: no-sync).
  void prepare_backward(bool sync) override;
  // Call after the last micro-batch's backward: naive mode all-reduces every main grad;
  // bucketed mode launches any bucket not yet launched, then waits for all of them.
  void finish_gradient_sync() override;

  int num_buckets() const { return int(flat_.size()); }
  // With record_events on, what happened in order ("launch bucket 3", "backward end",
  // ...): the overlap test reads it. Off by default (it would grow every step).
  void set_record_events(bool on) { record_events_ = on; }
  const std::vector<std::string>& events() const { return events_; }

 private:
  void build_buckets(double bucket_mb);
  void take(size_t param);    // a gradient into its bucket (bf16/fp16; fp32/fp64: autograd wrote it there)
  Work launch(size_t index, torch::Tensor& bucket);  // bucket [numel]: its all-reduce, asynchronous
  void record(const std::string& event) { if (record_events_) events_.push_back(event); }

  Comm& group_;
  std::vector<TrainableParam>& params_;
  DpMode mode_;
  std::vector<torch::Tensor> flat_;       // per bucket [numel]: its main grads, contiguous (the params' views)
  std::unique_ptr<GradBuckets> buckets_;  // bucketed mode: the hooks, the counts, the launches in order
  bool record_events_ = false;
  std::vector<std::string> events_;
};

}  // namespace picotron
