// zero/zero2.cpp — ZeRO-2: each gradient into its bucket as backward produces it, each
// complete bucket reduce-scattered at once into my slice. See zero2.h.
#include "zero/zero2.h"

#include <stdexcept>

namespace picotron {

Zero2Optimizer::Zero2Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                               AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                               bool offload, int stage, const std::vector<int>& units)
    : Zero1Optimizer(std::move(groups), named_params, opts, plan, here, bucket_mb, offload, stage, units) {
  // A hook on each parameter's gradient accumulator (picotron/optim.h).
  inflight_.resize(layout_.buckets.size());
  for (size_t b = 0; b < layout_.buckets.size(); ++b)
    for (size_t i = layout_.buckets[b].first_param; i < layout_.buckets[b].end_param; ++i) bucket_of_.push_back(b);
  hooks_.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.emplace_back(params_[i].param, params_[i].name, [this, i] { on_grad_ready(i); });
  rearm();
}

std::vector<int> Zero2Optimizer::embedding_alone(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                                                 const ShardPlan& plan, const MeshCoords& here) {
  std::vector<std::string> names;
  for (const auto& [name, p] : named_params) names.push_back(name);
  return embedding_alone_units(names, is_pipeline_end(plan, here));
}

void Zero2Optimizer::rearm() {
  for (size_t b = 0; b < inflight_.size(); ++b)
    inflight_[b].pending = int(layout_.buckets[b].end_param - layout_.buckets[b].first_param);
  next_to_launch_ = int(inflight_.size()) - 1;
}

void Zero2Optimizer::on_grad_ready(size_t i) {
  torch::NoGradGuard no_grad;
  auto& g = params_[i].param.mutable_grad();
  const size_t b = bucket_of_[i];
  const auto& bucket = layout_.buckets[b];
  auto& f = inflight_[b];
  if (!f.full.defined()) f.full = torch::zeros({bucket.padded}, grad_.options());  // [bucket padded]
  if (g.defined()) {
    f.full.narrow(0, layout_.offsets[i] - bucket.offset, g.numel()).add_(g.reshape({-1}));  // bf16 -> fp32
    g = torch::Tensor();  // freed: only my slice of the gradient outlives the micro-batch
  }
  for (auto& other : inflight_)  // on CPU, MPI moves the launched buckets only while we call it
    if (other.work) other.work->progress();
  if (--f.pending == 0) {
    on_bucket_complete(b);
    launch_ready_buckets();
  }
}

void Zero2Optimizer::launch_ready_buckets() {
  // Backward completes the last bucket first; every rank launches in the same order.
  while (next_to_launch_ >= 0 && inflight_[size_t(next_to_launch_)].pending == 0) {
    auto& f = inflight_[size_t(next_to_launch_)];
    const auto& bucket = layout_.buckets[size_t(next_to_launch_)];
    if (!f.full.defined()) f.full = torch::zeros({bucket.padded}, grad_.options());
    f.mine = torch::empty({bucket.padded / layout_.ranks}, grad_.options());
    record("launch bucket " + std::to_string(next_to_launch_));
    f.work = group_.reduce_scatter_async(f.mine, f.full, ReduceOp::kAvg, carries("ZeRO-2: a bucket of gradients, "
                                         "averaged, each rank keeping its slice"));  // [padded] -> my [padded / N]
    launched_.push_back(size_t(next_to_launch_));
    --next_to_launch_;
  }
  // At most two buckets in flight: the older ones are waited for and added into my slice,
  // so the full buffers of a whole gradient never exist at once.
  while (launched_.size() > 2) finish_oldest();
}

void Zero2Optimizer::finish_oldest() {
  const size_t b = launched_.front();
  launched_.pop_front();
  auto& f = inflight_[b];
  f.work->wait();
  slice_of(grad_, layout_.buckets[b]).add_(f.mine);  // this micro-batch's average of my part
  f.full = f.mine = torch::Tensor();                  // the bucket's buffers go
  f.work.reset();
}

void Zero2Optimizer::accumulate_grads() {
  torch::NoGradGuard no_grad;
  record("backward end");
  // Gradients written after their hook ran (zb-h1's W): into their buckets, not yet sent.
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& g = params_[i].param.mutable_grad();
    if (!g.defined()) continue;
    const size_t b = bucket_of_[i];
    TORCH_CHECK(int(b) <= next_to_launch_, "zero-2: the gradient of ", params_[i].name,
                " arrived after its bucket was sent");
    const auto& bucket = layout_.buckets[b];
    auto& f = inflight_[b];
    if (!f.full.defined()) f.full = torch::zeros({bucket.padded}, grad_.options());  // [bucket padded]
    f.full.narrow(0, layout_.offsets[i] - bucket.offset, g.numel()).add_(g.reshape({-1}));
    g = torch::Tensor();
  }
  for (auto& f : inflight_) f.pending = 0;  // a parameter without a gradient: send its bucket anyway
  launch_ready_buckets();
  while (!launched_.empty()) finish_oldest();
  rearm();
}

void Zero2Optimizer::sync_grads() {
  // Sums over tp (sp's norm gains) or over a pipeline's two ends (the tied embedding)
  // commute with the cp×dp average: they run on my pieces, which the ranks they sum over
  // own alike (zero2.h). Each parameter's main_grad is my piece while they run.
  average_over_replicas();  // HSDP: my slice holds the micro-batches' averages over my shard group
  if (!has_grad_sums()) return;
  // BEGIN ASSIGNMENT zero.slice_sums
  const auto none = torch::empty({0}, grad_.options());  // [0]: I own no piece of it
  for (auto& p : params_) p.main_grad = none;
  for (const auto& piece : layout_.pieces(group_.rank()))
    params_[piece.param].main_grad = grad_.narrow(0, piece.slice_offset, piece.length);  // [piece]
  // END ASSIGNMENT
  run_grad_sums(params_);
  for (auto& p : params_) p.main_grad = torch::Tensor();  // no full gradient, as before
}

}  // namespace picotron
