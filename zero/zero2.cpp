// zero/zero2.cpp — ZeRO-2: each gradient into its bucket as backward produces it, each
// complete bucket reduce-scattered at once into my slice. See zero2.h.
#include "zero/zero2.h"

#include <stdexcept>

namespace picotron {

Work SlicedGradients::launch(size_t k) {
  const size_t b = layout_bucket(k);
  const auto& bucket = shard_.layout.buckets[b];
  if (!full_[b].defined()) full_[b] = torch::zeros({bucket.padded}, shard_.grad.options());  // no gradient reached it
  mine_[b] = torch::empty({bucket.padded / shard_.layout.ranks}, shard_.grad.options());
  shard_.record("launch bucket " + std::to_string(b));
  return shard_.group.reduce_scatter_async(mine_[b], full_[b], ReduceOp::kAvg, carries("ZeRO-2: a bucket of gradients, "
                                           "averaged, each rank keeping its slice"));  // [padded] -> my [padded / N]
}

void SlicedGradients::add_into_slice(size_t k) {
  const size_t b = layout_bucket(k);
  shard_.slice(shard_.grad, b).add_(mine_[b]);  // this micro-batch's average of my part
  full_[b] = mine_[b] = torch::Tensor();       // the bucket's buffers go
}

void Zero2Optimizer::sync_grads() {
  shard_.average_over_replicas();  // HSDP: my slice holds the micro-batches' averages over my shard group
  if (has_grad_sums()) grads_.with_my_pieces([this](std::vector<TrainableParam>& held) { run_grad_sums(held); });
}

void Zero2Optimizer::step(double lr, double grad_scale) {
  shard_.update(lr, grad_scale);  // AdamW on my slice (zero_shard.cpp)
  for (size_t b = 0; b < shard_.layout.buckets.size(); ++b) shard_.all_gather_params(b);  // [padded / N] -> [padded]
}

Zero2Optimizer::Zero2Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                               AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                               bool offload)
    : shard_(std::move(groups), named_params, opts, plan, here,
             {zero_bucket_capacity(bucket_mb, named_params), embedding_alone(named_params, plan, here),
              /*whole_parameters=*/true, offload}) {}

// ---- the gradient path, shared with ZeRO-3 ----------------------------------------------

SlicedGradients::SlicedGradients(ZeroShard& shard, std::function<void(size_t)> on_complete) : shard_(shard) {
  const size_t n = shard_.layout.buckets.size();
  full_.resize(n);
  mine_.resize(n);
  std::vector<size_t> launch_index;  // per parameter: its bucket's place in the launch order
  for (size_t b = 0; b < n; ++b)
    for (size_t i = shard_.layout.buckets[b].first_param; i < shard_.layout.buckets[b].end_param; ++i)
      launch_index.push_back(n - 1 - b);
  GradBuckets::Calls calls{[this](size_t i) { take(i); }, [this](size_t k) { return launch(k); },
                           [this](size_t k) { add_into_slice(k); }, {}};
  if (on_complete) calls.complete = [this, on_complete](size_t k) { on_complete(layout_bucket(k)); };
  // At most two buckets in flight: the older ones are waited for and added into my slice,
  // so the full buffers of a whole gradient never exist at once.
  buckets_ = std::make_unique<GradBuckets>(shard_.params, std::move(launch_index), std::move(calls), /*max_in_flight=*/2);
}

void SlicedGradients::take(size_t i) {
  auto& g = shard_.params[i].param.mutable_grad();
  const size_t b = shard_.layout.buckets.size() - 1 - buckets_->bucket_of(i);
  const auto& bucket = shard_.layout.buckets[b];
  if (!full_[b].defined()) full_[b] = torch::zeros({bucket.padded}, shard_.grad.options());  // [bucket padded]
  if (!g.defined()) return;
  full_[b].narrow(0, shard_.layout.offsets[i] - bucket.offset, g.numel()).add_(g.reshape({-1}));  // bf16 -> fp32
  g = torch::Tensor();  // freed: only my slice of the gradient outlives the micro-batch
}

void SlicedGradients::finish_micro_batch() {
  torch::NoGradGuard no_grad;
  shard_.record("backward end");
  // Gradients written after their hook ran (zb-h1's W): into their buckets, not yet sent.
  for (size_t i = 0; i < shard_.params.size(); ++i) {
    if (!shard_.params[i].param.grad().defined()) continue;
    TORCH_CHECK(!buckets_->launched(buckets_->bucket_of(i)), "zero-2: the gradient of ", shard_.params[i].name,
                " arrived after its bucket was sent");
    take(i);
  }
  buckets_->flush();  // a parameter without a gradient: its bucket goes anyway; all added into my slice
  buckets_->arm();
}

void SlicedGradients::with_my_pieces(const std::function<void(std::vector<TrainableParam>&)>& sums) {
  // Sums over tp (sp's norm gains) or over a pipeline's two ends (the tied embedding)
  // commute with the cp×dp average: they run on my pieces, which the ranks they sum over
  // own alike (zero2.h). Each parameter's main_grad is my piece while they run.
  auto& params = shard_.params;
  // BEGIN ASSIGNMENT zero.slice_sums
  const auto none = torch::empty({0}, shard_.grad.options());  // [0]: I own no piece of it
  for (auto& p : params) p.main_grad = none;
  for (const auto& piece : shard_.layout.pieces(shard_.group.rank()))
    params[piece.param].main_grad = shard_.grad.narrow(0, piece.slice_offset, piece.length);  // [piece]
  // END ASSIGNMENT
  sums(params);
  for (auto& p : params) p.main_grad = torch::Tensor();  // no full gradient, as before
}

std::vector<int> embedding_alone(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                                 const ShardPlan& plan, const MeshCoords& here) {
  std::vector<std::string> names;
  for (const auto& [name, p] : named_params) names.push_back(name);
  return embedding_alone_units(names, is_pipeline_end(plan, here));
}

}  // namespace picotron
