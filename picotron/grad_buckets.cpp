// picotron/grad_buckets.cpp — see grad_buckets.h.
#include "picotron/grad_buckets.h"

#include <stdexcept>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace picotron {

GradReadyHook::GradReadyHook(const torch::Tensor& param, const std::string& name, std::function<void()> on_ready)
    : node_(torch::autograd::impl::grad_accumulator(param)) {
  TORCH_CHECK(node_, "parameter ", name, " does not require grad");
  key_ = node_->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [on_ready = std::move(on_ready)](const torch::autograd::variable_list& outputs,
                                       const torch::autograd::variable_list&) {
        on_ready();
        return outputs;
      }));
}

GradReadyHook::~GradReadyHook() {
  if (node_) node_->del_post_hook(key_);  // the hook may capture an object that is going
}

GradBuckets::GradBuckets(const std::vector<TrainableParam>& params, std::vector<size_t> bucket_of, Calls calls,
                         int max_in_flight)
    : params_(params), bucket_of_(std::move(bucket_of)), calls_(std::move(calls)), max_in_flight_(max_in_flight) {
  TORCH_CHECK(bucket_of_.size() == params_.size(), "grad buckets: one bucket per parameter");
  for (size_t b : bucket_of_) {
    if (b >= size_.size()) size_.resize(b + 1, 0);
    ++size_[b];
  }
  arm();
  // One hook per parameter, on its gradient accumulator: it runs right after this
  // parameter's gradient of the micro-batch is complete.
  hooks_.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.emplace_back(params_[i].param, params_[i].name, [this, i] { on_grad_ready(i); });
}

void GradBuckets::arm(bool launch) {
  launch_ = launch;
  pending_ = size_;
  arrived_.assign(params_.size(), false);
  next_ = 0;
}

void GradBuckets::on_grad_ready(size_t i) {
  // One gradient per parameter per backward: a second one would launch its bucket early.
  TORCH_CHECK(!arrived_[i], "the gradient of ", params_[i].name, " arrived twice since prepare_backward() ",
              "(two backward passes without prepare_backward in between, or retain_graph)");
  arrived_[i] = true;
  {
    torch::NoGradGuard no_grad;
    calls_.take(i);
  }
  for (auto& [bucket, work] : in_flight_) work.progress();  // on CPU, MPI moves data only while we call it
  // BEGIN ASSIGNMENT dp.bucketed_all_reduce
  const size_t b = bucket_of_[i];
  if (--pending_[b] > 0) return;
  if (calls_.complete) calls_.complete(b);
  if (!launch_) return;  // no-sync (gradient accumulation): only accumulate
  launch_ready();
  // END ASSIGNMENT
}

void GradBuckets::launch_ready() {
  // BEGIN ASSIGNMENT dp.bucketed_all_reduce
  while (next_ < pending_.size() && pending_[next_] == 0) {
    in_flight_.emplace_back(next_, calls_.launch(next_));
    ++next_;
  }
  // END ASSIGNMENT
  while (max_in_flight_ > 0 && int(in_flight_.size()) > max_in_flight_) finish_oldest();
}

void GradBuckets::finish_oldest() {
  auto [bucket, work] = std::move(in_flight_.front());
  in_flight_.pop_front();
  work.wait();
  if (calls_.done) calls_.done(bucket);
}

void GradBuckets::flush() {
  std::fill(pending_.begin(), pending_.end(), 0);
  launch_ = true;
  launch_ready();
  while (!in_flight_.empty()) finish_oldest();
}

}  // namespace picotron
