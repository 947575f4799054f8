// zero/zero_shard.cpp — the buffers every ZeRO stage owns, my slice, its AdamW update and
// the all-gather of the updated parts. See zero_shard.h.
#include "zero/zero_shard.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "picotron/dtype.h"

namespace picotron {

ZeroShard::ZeroShard(ZeroGroups groups_in, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                     AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, Options options)
    : groups(std::move(groups_in)), group(groups.shard()), options_(std::move(options)) {
  TORCH_CHECK(!named_params.empty(), "zero: no parameters");
  torch::NoGradGuard no_grad;
  const auto compute = named_params.front().second.options();
  const auto state_dtype = accumulate_type(named_params.front().second.scalar_type());  // fp32 (fp64)
  std::vector<int64_t> numels;
  for (const auto& [name, p] : named_params) numels.push_back(p.numel());
  layout = zero_layout(numels, group.size(), options_.bucket_capacity, options_.units);

  // The bucket buffers; each model tensor becomes a view of its range (values kept).
  for (const auto& b : layout.buckets) bucket.push_back(torch::zeros({b.padded}, compute));  // [padded]
  for (size_t b = 0; b < layout.buckets.size(); ++b)
    for (size_t i = layout.buckets[b].first_param; i < layout.buckets[b].end_param; ++i) {
      const auto& [name, p] = named_params[i];
      TORCH_CHECK(p.options().dtype() == compute.dtype() && p.device() == compute.device(),
                  "zero: every parameter must share one dtype and device (", name, ")");
      auto range = bucket[b].narrow(0, layout.offsets[i] - layout.buckets[b].offset, p.numel());
      range.copy_(p.reshape({-1}));
      p.set_data(range.view(p.sizes()));  // the module's tensor now lives in the bucket (its old one is freed)
    }
  for (const auto& [name, p] : named_params) {
    TrainableParam tp;
    tp.name = name;
    tp.param = p;
    tp.decay = p.dim() >= 2;
    const auto it = plan.find(name);
    TORCH_CHECK(it != plan.end(), "zero: parameter ", name, " has no shard record");
    tp.record = it->second;
    params.push_back(std::move(tp));
  }
  grad = torch::zeros({layout.shard}, compute.dtype(state_dtype));  // [P_pad / N]
  if (!options_.whole_parameters) {  // stage 3: my part of every bucket, the only copy kept for good
    shard_params_ = torch::empty({layout.shard}, compute);
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      const int64_t part = layout.buckets[b].padded / layout.ranks;
      slice(shard_params_, b).copy_(bucket[b].narrow(0, group.rank() * part, part));
    }
  }

  // Master and moments: with the parameters, or (offload) in CPU memory, pinned when the
  // parameters are on a GPU so that copies to and from it can run asynchronously.
  const bool offload = options_.offload;
  const auto optimizer_at = offload ? torch::TensorOptions().dtype(state_dtype).device(torch::kCPU)
                                          .pinned_memory(compute.device().is_cuda())
                                    : grad.options();
  master_in_place_ = !offload && compute.dtype() == state_dtype;  // fp32/fp64: the parameters are the masters
  if (!master_in_place_) {
    master_ = torch::empty({layout.shard}, optimizer_at);
    for (size_t b = 0; b < layout.buckets.size(); ++b) slice(master_, b).copy_(my_params(b));
  }
  if (offload) host_grad_ = torch::empty({layout.shard}, optimizer_at);
  exp_avg_ = torch::zeros({layout.shard}, optimizer_at);
  exp_avg_sq_ = torch::zeros({layout.shard}, optimizer_at);

  // The per-element rules as runs of my slice: weight decay (matrices) and whether an
  // element counts in the norm. Adjacent pieces with the same rules merge: a few runs per
  // layer, instead of two more slice-sized masks.
  std::vector<size_t> bucket_of_run;
  size_t b = 0;
  for (const auto& piece : layout.pieces(group.rank())) {
    while (piece.slice_offset >= layout.buckets[b].shard_offset + layout.buckets[b].padded / group.size()) ++b;
    const auto& p = params[piece.param];
    // Each dp/cp rank of the shard group holds a different slice now: only tp / pp copies
    // and (HSDP) the replicas of my slice can repeat an element; replica 0's counts.
    ShardRecord r = p.record;
    auto& axes = r.replica_axes;
    axes.erase(std::remove_if(axes.begin(), axes.end(), [](Axis a) { return a == Axis::kDp || a == Axis::kCp; }),
               axes.end());
    const Run run{piece.slice_offset, piece.length, p.decay, r.counts_once(here) && groups.replica() == 0};
    if (!runs_.empty() && bucket_of_run.back() == b && runs_.back().offset + runs_.back().length == run.offset &&
        runs_.back().decay == run.decay && runs_.back().counts == run.counts) {
      runs_.back().length += run.length;
    } else {
      runs_.push_back(run);
      bucket_of_run.push_back(b);
    }
  }

  // Plain AdamW over my slice: one TrainableParam per run, every tensor a view of the
  // slice buffers, so AdamW's update IS the update of my slice.
  std::vector<TrainableParam> stretches;
  for (size_t k = 0; k < runs_.size(); ++k) {
    const Run& run = runs_[k];
    const auto& bk = layout.buckets[bucket_of_run[k]];
    const auto cut = [&](const torch::Tensor& t) { return t.narrow(0, run.offset, run.length); };
    TrainableParam s;
    s.name = "slice[" + std::to_string(run.offset) + ", " + std::to_string(run.offset + run.length) + ")";
    s.master = master_in_place_ ? my_params(bucket_of_run[k]).narrow(0, run.offset - bk.shard_offset, run.length)
                                : cut(master_);
    s.param = s.master;  // nothing to round: the stage moves the weights (all_gather_params, or my shard)
    s.main_grad = cut(offload ? host_grad_ : grad);
    s.exp_avg = cut(exp_avg_);
    s.exp_avg_sq = cut(exp_avg_sq_);
    s.decay = run.decay;
    stretches.push_back(std::move(s));
  }
  adamw_ = AdamW::over(std::move(stretches), opts);
}

int64_t zero_bucket_capacity(double bucket_mb, const std::vector<std::pair<std::string, torch::Tensor>>& named_params) {
  TORCH_CHECK(!named_params.empty(), "zero: no parameters");
  const auto state_dtype = accumulate_type(named_params.front().second.scalar_type());  // fp32 (fp64)
  return std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / int64_t(c10::elementSize(state_dtype)));
}

torch::Tensor ZeroShard::slice(const torch::Tensor& shard_buffer, size_t b) const {
  return shard_buffer.narrow(0, layout.buckets[b].shard_offset, layout.buckets[b].padded / layout.ranks);
}

torch::Tensor ZeroShard::my_params(size_t b) const {
  if (!options_.whole_parameters) return slice(shard_params_, b);  // stage 3: my shard
  const int64_t part = layout.buckets[b].padded / layout.ranks;
  return bucket[b].narrow(0, group.rank() * part, part);  // my part of bucket b's parameters
}

void ZeroShard::update(double lr, double grad_scale) {
  // Offload: the gradient slice goes down to the CPU (one copy), AdamW runs there.
  torch::NoGradGuard no_grad;
  if (options_.offload) host_grad_.copy_(grad);  // device -> pinned host, waits for the gradients
  adamw_->step(lr, grad_scale);
  if (options_.whole_parameters || master_in_place_) return;  // (fp32/fp64: the update wrote my shard)
  for (size_t b = 0; b < layout.buckets.size(); ++b)  // stage 3: master -> my compute-dtype shard; forward gathers it
    my_params(b).copy_(slice(master_, b), /*non_blocking=*/options_.offload);
}

void ZeroShard::all_gather_params(size_t b) {
  // Everyone's updated part into everyone's parameters. (The input is a copy: MPI forbids
  // overlapping send and receive buffers.)
  const auto& updated = master_in_place_ ? my_params(b) : slice(master_, b);
  // BEGIN ASSIGNMENT zero.stage1
  auto& everyone = bucket[b];  // [bucket padded]
  const auto mine = updated.to(everyone.device(), everyone.scalar_type(), /*non_blocking=*/options_.offload, /*copy=*/true);
  group.all_gather(everyone, mine, carries("ZeRO: every rank's updated slice, to everyone"));  // [padded / N] -> [padded]
  // END ASSIGNMENT
}

void ZeroShard::average_over_replicas() {
  if (!groups.replicated()) return;
  Comm& replicas = groups.replicas();
  // BEGIN ASSIGNMENT zero.hsdp
  // [P_pad / N]: my shard group's average -> the whole group's
  replicas.all_reduce(grad, ReduceOp::kAvg, carries("HSDP: my slice of the gradient, averaged over the replicas "
                                                    "that hold the same slice"));
  // END ASSIGNMENT
}

double ZeroShard::grad_norm(Comm& world) {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({1}, grad.options().dtype(torch::kFloat64));  // [1]
  for (const auto& run : runs_)
    if (run.counts) sum += grad.narrow(0, run.offset, run.length).norm().to(torch::kFloat64).square();
  world.all_reduce(sum, ReduceOp::kSum, carries("the global gradient norm: each rank's sum of squares"));
  return std::sqrt(sum.item<double>());
}

torch::Tensor ZeroShard::master_piece(const ZeroLayout::Piece& piece) const {
  if (!master_in_place_) return master_.narrow(0, piece.slice_offset, piece.length);
  return weights_piece(piece);  // fp32/fp64: the weights are the masters
}

torch::Tensor ZeroShard::weights_piece(const ZeroLayout::Piece& piece) const {
  if (!options_.whole_parameters) return shard_params_.narrow(0, piece.slice_offset, piece.length);
  return params[piece.param].param.view({-1}).narrow(0, piece.first, piece.length);
}

}  // namespace picotron
