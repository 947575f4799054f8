// data_parallel/data_parallel.cpp — see data_parallel.h for the picture and the costs.
#include "data_parallel/data_parallel.h"

#include <stdexcept>

namespace picotron {

DataParallel::DataParallel(Comm& group, std::vector<TrainableParam>& params, DpMode mode, double bucket_mb)
    : group_(group), params_(params), mode_(mode) {
  // A group of one has nothing to average: no buckets, no hooks, no communication.
  if (mode_ != DpMode::kBucketed || group_.size() == 1 || params_.empty()) return;
  build_buckets(bucket_mb);
  ready_.assign(params_.size(), false);
  // One hook per parameter, on its gradient accumulator: the autograd node that writes
  // param.grad. It runs right after this parameter's gradient of the micro-batch is complete.
  hooks_.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.emplace_back(params_[i].param, params_[i].name, [this, i] { on_grad_ready(i); });
}

DataParallel::~DataParallel() = default;  // the hooks (they capture `this`) go first

void DataParallel::prepare_backward(bool sync) {
  sync_ = sync;
  // Every bucket waits for all its gradients again, whatever the last backward left
  // (a parameter that got no gradient would otherwise shift the count).
  for (auto& b : buckets_) b.pending = int(b.params.size());
  ready_.assign(params_.size(), false);
}

void DataParallel::build_buckets(double bucket_mb) {
  // Main grads have the masters' dtype and shape (fp32, or fp64 in fp64 runs).
  const auto dtype = params_.empty() ? torch::kFloat32 : params_.front().master.scalar_type();
  const int64_t capacity = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / int64_t(torch::elementSize(dtype)));
  bucket_of_.assign(params_.size(), 0);
  // Reverse order: backward produces the last layers' gradients first.
  std::vector<std::vector<size_t>> groups(1);
  int64_t filled = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t n = params_[k].master.numel();
    if (filled > 0 && filled + n > capacity) { groups.emplace_back(); filled = 0; }  // a big param gets its own bucket
    groups.back().push_back(k);
    filled += n;
  }
  for (auto& members : groups) {
    Bucket b;
    int64_t total = 0;
    for (size_t k : members) total += params_[k].master.numel();
    b.flat = torch::zeros({total}, params_[members.front()].master.options());  // [numel]
    int64_t offset = 0;
    for (size_t k : members) {
      auto& p = params_[k];
      TORCH_CHECK(p.master.scalar_type() == dtype, "all main grads must share one dtype");
      auto view = b.flat.narrow(0, offset, p.master.numel()).view(p.master.sizes());
      if (p.main_grad.defined()) view.copy_(p.main_grad);
      p.main_grad = view;  // from now on the optimizer reads the bucket
      if (p.aliases_grad()) p.param.mutable_grad() = view;  // autograd accumulates into the bucket
      offset += p.master.numel();
      bucket_of_[k] = buckets_.size();
    }
    b.params = members;
    b.pending = int(members.size());
    buckets_.push_back(std::move(b));
  }
}

void DataParallel::on_grad_ready(size_t i) {
  torch::NoGradGuard no_grad;
  auto& p = params_[i];
  // One gradient per parameter per backward: a second one would launch its bucket early.
  TORCH_CHECK(!ready_[i], "data parallelism: the gradient of ", p.name, " arrived twice since prepare_backward() ",
              "(two backward passes without prepare_backward in between, or retain_graph)");
  ready_[i] = true;
  auto& g = p.param.mutable_grad();
  if (g.defined() && !g.is_same(p.main_grad)) {
    TORCH_CHECK(!p.aliases_grad(), "data parallelism: ", p.name, ".grad is no longer its bucket view (zero_grad()? ",
                "create_graph?)");
    p.main_grad.add_(g);  // accumulate into the bucket (bf16 grad -> fp32 main grad)
    g = torch::Tensor();
  }  // (fp32/fp64: grad IS the main grad, a view of the bucket: autograd already added it)
  for (auto& other : buckets_)  // on CPU, MPI sends only while we are inside an MPI call
    if (other.work) other.work->progress();
  // BEGIN ASSIGNMENT dp.bucketed_all_reduce
  Bucket& b = buckets_[bucket_of_[i]];
  if (--b.pending > 0 || !sync_) return;  // no-sync (gradient accumulation): only accumulate
  launch_ready_buckets();
  // END ASSIGNMENT
}

void DataParallel::launch_ready_buckets() {
  // All ranks must issue collectives in the same order; buckets complete in (almost)
  // index order, and we never launch bucket j before bucket j-1.
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    launch(buckets_[next_to_launch_], next_to_launch_);
    ++next_to_launch_;
  }
}

void DataParallel::launch(Bucket& b, size_t index) {
  record("launch bucket " + std::to_string(index));
  // BEGIN ASSIGNMENT dp.bucketed_all_reduce
  b.work = group_.all_reduce_async(b.flat, ReduceOp::kAvg, carries("data parallelism: a bucket of gradients, "
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
  // A parameter that received no gradient leaves its bucket pending: send it anyway.
  for (auto& b : buckets_) b.pending = 0;
  launch_ready_buckets();
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
  }
  next_to_launch_ = 0;
  record("all buckets reduced");
}

}  // namespace picotron
