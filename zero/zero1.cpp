// zero/zero1.cpp — ZeRO-1: the full gradient reduce-scattered into my slice, AdamW on my
// slice, and the all-gather of the updated parts. See zero1.h for the picture and the costs.
#include "zero/zero1.h"

#include <stdexcept>

namespace picotron {

void Zero1Optimizer::sync_grads() {
  run_grad_sums(shard_.params);  // on the full gradient, while it exists
  // BEGIN ASSIGNMENT zero.stage1
  for (size_t b = 0; b < shard_.layout.buckets.size(); ++b) {
    const auto& bucket = shard_.layout.buckets[b];
    auto mine = shard_.slice(shard_.grad, b);                                                 // [bucket padded / N]
    shard_.group.reduce_scatter(mine, flat_grad_.narrow(0, bucket.offset, bucket.padded), ReduceOp::kAvg, carries(
                                "ZeRO: a bucket of gradients, averaged, each rank keeping its slice"));
  }
  // END ASSIGNMENT
  shard_.average_over_replicas();
}

void Zero1Optimizer::step(double lr, double grad_scale) {
  shard_.update(lr, grad_scale);  // AdamW on my slice (zero_shard.cpp)
  for (size_t b = 0; b < shard_.layout.buckets.size(); ++b) shard_.all_gather_params(b);  // [padded / N] -> [padded]
}

Zero1Optimizer::Zero1Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                               AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                               bool offload)
    : shard_(std::move(groups), named_params, opts, plan, here,
             {zero_bucket_capacity(bucket_mb, named_params), /*units=*/{}, /*whole_parameters=*/true, offload}) {
  // The full gradient, each parameter's main_grad a view of it.
  flat_grad_ = torch::zeros({shard_.layout.padded}, shard_.grad.options());  // [P_pad]
  for (size_t i = 0; i < shard_.params.size(); ++i) {
    auto& p = shard_.params[i];
    p.main_grad = flat_grad_.narrow(0, shard_.layout.offsets[i], p.param.numel()).view(p.param.sizes());
    if (p.param.scalar_type() == flat_grad_.scalar_type()) p.master = p.param;  // marks "param.grad is main_grad"
  }
  zero_main_grads();
}

void Zero1Optimizer::zero_main_grads() {
  shard_.grad.zero_();
  flat_grad_.zero_();
  for (auto& p : shard_.params)
    if (p.aliases_grad()) p.param.mutable_grad() = p.main_grad;  // autograd accumulates in place
}

void Zero1Optimizer::accumulate_grads() {
  torch::NoGradGuard no_grad;
  for (auto& p : shard_.params) {
    auto& g = p.param.mutable_grad();
    if (!g.defined() || g.is_same(p.main_grad)) continue;
    p.main_grad.add_(g);  // bf16 -> fp32
    g = torch::Tensor();
  }
}

}  // namespace picotron
