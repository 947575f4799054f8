// data_parallel/data_parallel.cpp — see data_parallel.h for the picture and the costs.
#include "data_parallel/data_parallel.h"

#include <stdexcept>

namespace picotron {

DataParallel::DataParallel(Comm& group, std::vector<TrainableParam>& params, DpMode mode, double bucket_mb)
    : group_(group), params_(params), mode_(mode) {
  // A group of one has nothing to average: no buckets, no hooks, no communication.
  if (mode_ != DpMode::kBucketed || group_.size() == 1 || params_.empty()) return;
  build_buckets(bucket_mb);
}

DataParallel::~DataParallel() = default;  // the hooks (they capture `this`) go first

void DataParallel::prepare_backward(bool sync) {
  // Every bucket waits for all its gradients again; only the last micro-batch sends.
  if (buckets_) buckets_->arm(/*launch=*/sync);
}

void DataParallel::build_buckets(double bucket_mb) {
  // Main grads have the masters' dtype and shape (fp32, or fp64 in fp64 runs).
  const auto dtype = params_.front().master.scalar_type();
  const int64_t capacity = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / int64_t(torch::elementSize(dtype)));
  // Reverse order: backward produces the last layers' gradients first, so bucket 0 holds
  // the last parameters and launches first.
  std::vector<std::vector<size_t>> members(1);
  int64_t filled = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t n = params_[k].master.numel();
    if (filled > 0 && filled + n > capacity) { members.emplace_back(); filled = 0; }  // a big param gets its own bucket
    members.back().push_back(k);
    filled += n;
  }
  std::vector<size_t> bucket_of(params_.size(), 0);
  for (size_t b = 0; b < members.size(); ++b) {
    int64_t total = 0;
    for (size_t k : members[b]) total += params_[k].master.numel();
    flat_.push_back(torch::zeros({total}, params_[members[b].front()].master.options()));  // [numel]
    int64_t offset = 0;
    for (size_t k : members[b]) {
      auto& p = params_[k];
      TORCH_CHECK(p.master.scalar_type() == dtype, "all main grads must share one dtype");
      auto view = flat_[b].narrow(0, offset, p.master.numel()).view(p.master.sizes());
      if (p.main_grad.defined()) view.copy_(p.main_grad);
      p.main_grad = view;  // from now on the optimizer reads the bucket
      if (p.aliases_grad()) p.param.mutable_grad() = view;  // autograd accumulates into the bucket
      offset += p.master.numel();
      bucket_of[k] = b;
    }
  }
  buckets_ = std::make_unique<GradBuckets>(params_, std::move(bucket_of),
                                           GradBuckets::Calls{[this](size_t i) { take(i); },
                                                              [this](size_t b) { return launch(b, flat_[b]); }, {}, {}});
}

void DataParallel::take(size_t i) {
  auto& p = params_[i];
  auto& g = p.param.mutable_grad();
  if (!g.defined() || g.is_same(p.main_grad)) return;  // fp32/fp64: grad IS the main grad, autograd added it
  TORCH_CHECK(!p.aliases_grad(), "data parallelism: ", p.name, ".grad is no longer its bucket view (zero_grad()? ",
              "create_graph?)");
  p.main_grad.add_(g);  // accumulate into the bucket (bf16 grad -> fp32 main grad)
  g = torch::Tensor();
}

Work DataParallel::launch(size_t index, torch::Tensor& bucket) {
  record("launch bucket " + std::to_string(index));
  // BEGIN ASSIGNMENT dp.bucketed_all_reduce
  return group_.all_reduce_async(bucket, ReduceOp::kAvg, carries("data parallelism: a bucket of gradients, "
                                                                   "averaged over the replicas"));  // [numel], in place
  // END ASSIGNMENT
}

void DataParallel::finish_gradient_sync() {
  record("backward end");
  if (group_.size() == 1) return;  // nothing to average
  if (mode_ == DpMode::kNaive) {
    // After backward: one all-reduce per parameter, each waited for (bounded by the
    // timeout) before the next. Nothing overlapped.
    // BEGIN ASSIGNMENT dp.naive_all_reduce
    for (size_t i = 0; i < params_.size(); ++i) {
      record("launch param " + std::to_string(i));
      group_.all_reduce_async(params_[i].main_grad, ReduceOp::kAvg, carries("data parallelism: a gradient no bucket "
                                                                            "took, averaged over the replicas")).wait();
    }
    // END ASSIGNMENT
    return;
  }
  buckets_->flush();  // buckets a parameter without a gradient left pending go too; all waited for
  record("all buckets reduced");
}

}  // namespace picotron
