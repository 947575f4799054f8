// data_parallel/data_parallel.cpp — see data_parallel.h for the picture and the costs.
#include "data_parallel/data_parallel.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace picotron {

DataParallel::DataParallel(Comm& group, std::vector<TrainableParam>& params, DpMode mode, double bucket_mb)
    : group_(group), params_(params), mode_(mode) {
  if (mode_ != DpMode::kBucketed) return;
  build_buckets(bucket_mb);
  // One hook per parameter, on its gradient accumulator: the autograd node that writes
  // param.grad. It runs right after this parameter's gradient of the micro-batch is complete.
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i].param);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_grad_ready(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));  // the parameter only holds it weakly
  }
}

DataParallel::~DataParallel() {
  // Hooks capture `this`: remove them with the accumulators they live on.
  for (auto& acc : accumulators_) acc->post_hooks().clear();
}

void DataParallel::build_buckets(double bucket_mb) {
  const auto dtype = params_.empty() ? torch::kFloat32 : params_.front().main_grad.scalar_type();
  const int64_t capacity = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / int64_t(torch::elementSize(dtype)));
  bucket_of_.assign(params_.size(), 0);
  // Reverse order: backward produces the last layers' gradients first.
  std::vector<std::vector<size_t>> groups(1);
  int64_t filled = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t n = params_[k].main_grad.numel();
    if (filled > 0 && filled + n > capacity) { groups.emplace_back(); filled = 0; }  // a big param gets its own bucket
    groups.back().push_back(k);
    filled += n;
  }
  for (auto& members : groups) {
    Bucket b;
    int64_t total = 0;
    for (size_t k : members) total += params_[k].main_grad.numel();
    b.flat = torch::zeros({total}, params_[members.front()].main_grad.options());  // [numel]
    int64_t offset = 0;
    for (size_t k : members) {
      auto& p = params_[k];
      TORCH_CHECK(p.main_grad.scalar_type() == dtype, "all main grads must share one dtype");
      auto view = b.flat.narrow(0, offset, p.main_grad.numel()).view(p.main_grad.sizes());
      view.copy_(p.main_grad);
      p.main_grad = view;  // from now on the optimizer reads the bucket
      offset += p.main_grad.numel();
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
  auto& g = p.param.mutable_grad();
  if (g.defined()) {
    p.main_grad.add_(g);  // accumulate into the bucket (fp32 main grad)
    g = torch::Tensor();
  }
  for (auto& other : buckets_)  // on CPU, MPI sends only while we are inside an MPI call
    if (other.work) other.work->progress();
  Bucket& b = buckets_[bucket_of_[i]];
  if (--b.pending > 0) return;
  if (!sync_) {  // gradient accumulation: not the last micro-batch, nothing to send yet
    b.pending = int(b.params.size());
    return;
  }
  launch_ready_buckets();
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
  events_.push_back("launch bucket " + std::to_string(index));
  b.work = group_.all_reduce_async(b.flat, ReduceOp::kAvg);  // [numel] -> dp-average, in place
}

void DataParallel::finish_gradient_sync() {
  events_.push_back("backward end");
  if (mode_ == DpMode::kNaive) {
    // After backward: one blocking all-reduce per parameter. Nothing overlapped.
    for (size_t i = 0; i < params_.size(); ++i) {
      events_.push_back("launch param " + std::to_string(i));
      group_.all_reduce(params_[i].main_grad, ReduceOp::kAvg);
    }
    return;
  }
  // A parameter that received no gradient leaves its bucket pending: send it anyway.
  for (auto& b : buckets_) b.pending = 0;
  launch_ready_buckets();
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    b.pending = int(b.params.size());  // ready for the next step
  }
  next_to_launch_ = 0;
  events_.push_back("all buckets reduced");
}

}  // namespace picotron
