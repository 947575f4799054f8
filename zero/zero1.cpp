// zero/zero1.cpp — ZeRO-1: the bucket parameters, the full gradient reduce-scattered into
// my slice, the norm, AdamW on my slice, and the all-gather of the updated parts. See
// zero1.h for the picture and the costs; the layout is zero_layout.cpp.
#include "zero/zero1.h"

#include "picotron/dtype.h"
#include "picotron/format.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace picotron {

Zero1Optimizer::Zero1Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                               AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                               bool offload, int stage, const std::vector<int>& units)
    : groups_(std::move(groups)), group_(groups_.shard()), opts_(opts), stage_(stage), offload_(offload) {
  Comm& group = group_;
  TORCH_CHECK(!named_params.empty(), "zero: no parameters");
  torch::NoGradGuard no_grad;
  const auto compute = named_params.front().second.options();
  const auto state_dtype = accumulate_type(named_params.front().second.scalar_type());  // fp32 (fp64)
  std::vector<int64_t> numels;
  for (const auto& [name, p] : named_params) numels.push_back(p.numel());
  // Buckets bound every temporary buffer (and, in stage 2, what is in flight). Stage 3:
  // one bucket per unit, whatever its size (a unit is gathered whole).
  const int64_t capacity = stage == 3 ? INT64_MAX
      : std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / int64_t(c10::elementSize(state_dtype)));
  layout_ = zero_layout(numels, group.size(), capacity, units);

  // The bucket parameters; each model tensor becomes a view of its range (values kept).
  for (const auto& b : layout_.buckets) bucket_param_.push_back(torch::zeros({b.padded}, compute));  // [padded]
  for (size_t b = 0; b < layout_.buckets.size(); ++b)
    for (size_t i = layout_.buckets[b].first_param; i < layout_.buckets[b].end_param; ++i) {
      const auto& [name, p] = named_params[i];
      TORCH_CHECK(p.options().dtype() == compute.dtype() && p.device() == compute.device(),
                  "zero: every parameter must share one dtype and device (", name, ")");
      auto range = bucket_param_[b].narrow(0, layout_.offsets[i] - layout_.buckets[b].offset, p.numel());
      range.copy_(p.reshape({-1}));
      p.set_data(range.view(p.sizes()));  // the module's tensor now lives in the bucket (its old one is freed)
    }
  const bool full_gradient = stage == 1;  // stages 2 and 3 never hold the whole gradient
  if (full_gradient) flat_grad_ = torch::zeros({layout_.padded}, compute.dtype(state_dtype));  // [P_pad]
  for (size_t i = 0; i < named_params.size(); ++i) {
    const auto& [name, p] = named_params[i];
    TrainableParam tp;
    tp.name = name;
    tp.param = p;
    if (full_gradient) {
      tp.main_grad = flat_grad_.narrow(0, layout_.offsets[i], p.numel()).view(p.sizes());
      if (p.scalar_type() == state_dtype) tp.master = p;  // marks "param.grad is main_grad" (aliases_grad)
    }
    tp.decay = p.dim() >= 2;
    const auto it = plan.find(name);
    TORCH_CHECK(it != plan.end(), "zero: parameter ", name, " has no shard record");
    tp.record = it->second;
    params_.push_back(std::move(tp));
  }

  // My slice: gradient, master, moments, and the per-element rules.
  grad_ = torch::zeros({layout_.shard}, compute.dtype(state_dtype));
  // Where the optimizer lives: with the parameters, or (offload) in CPU memory, pinned when
  // the parameters are on a GPU so that copies to and from it can run asynchronously.
  const auto optimizer_at = offload ? torch::TensorOptions().dtype(state_dtype).device(torch::kCPU)
                                          .pinned_memory(compute.device().is_cuda())
                                    : grad_.options();
  master_in_place_ = !offload && compute.dtype() == state_dtype;  // fp32/fp64: the parameters are the masters
  if (!master_in_place_) {
    master_ = torch::empty({layout_.shard}, optimizer_at);
    for (size_t b = 0; b < layout_.buckets.size(); ++b)  // (my part of the bucket: what every stage starts from)
      slice_of(master_, layout_.buckets[b]).copy_(Zero1Optimizer::my_params(b));
  }
  if (offload) host_grad_ = torch::empty({layout_.shard}, optimizer_at);  // the gradient slice, copied down
  exp_avg_ = torch::zeros({layout_.shard}, optimizer_at);
  exp_avg_sq_ = torch::zeros({layout_.shard}, optimizer_at);
  // The per-element rules as runs of my slice: weight decay (matrices) and whether an
  // element counts in the norm. Adjacent pieces with the same rules merge: a few runs per
  // layer, instead of two more slice-sized masks.
  runs_.resize(layout_.buckets.size());
  size_t bucket = 0;
  for (const auto& piece : layout_.pieces(group.rank())) {
    while (piece.slice_offset >= layout_.buckets[bucket].shard_offset + layout_.buckets[bucket].padded / group.size())
      ++bucket;
    const auto& p = params_[piece.param];
    // Each dp/cp rank of the shard group holds a different slice now: only tp / pp copies
    // and (HSDP) the replicas of my slice can repeat an element; replica 0's counts.
    ShardRecord r = p.record;
    auto& axes = r.replica_axes;
    axes.erase(std::remove_if(axes.begin(), axes.end(), [](Axis a) { return a == Axis::kDp || a == Axis::kCp; }),
               axes.end());
    const Run run{piece.slice_offset, piece.length, p.decay, r.counts_once(here) && groups_.replica() == 0};
    auto& runs = runs_[bucket];
    if (!runs.empty() && runs.back().offset + runs.back().length == run.offset && runs.back().decay == run.decay &&
        runs.back().counts == run.counts)
      runs.back().length += run.length;
    else
      runs.push_back(run);
  }
  Zero1Optimizer::zero_main_grads();
}

torch::Tensor Zero1Optimizer::slice_of(const torch::Tensor& shard_buffer, const ZeroLayout::Bucket& b) const {
  return shard_buffer.narrow(0, b.shard_offset, b.padded / layout_.ranks);  // my part of bucket b
}

torch::Tensor Zero1Optimizer::my_params(size_t b) const {
  const int64_t part = layout_.buckets[b].padded / layout_.ranks;
  return bucket_param_[b].narrow(0, group_.rank() * part, part);  // my part of bucket b's parameters
}

void Zero1Optimizer::zero_main_grads() {
  grad_.zero_();
  if (!flat_grad_.defined()) return;  // stages 2 and 3: no full gradient to zero
  flat_grad_.zero_();
  for (auto& p : params_)
    if (p.aliases_grad()) p.param.mutable_grad() = p.main_grad;  // autograd accumulates in place
}

void Zero1Optimizer::accumulate_grads() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    auto& g = p.param.mutable_grad();
    if (!g.defined() || g.is_same(p.main_grad)) continue;
    p.main_grad.add_(g);  // bf16 -> fp32
    g = torch::Tensor();
  }
}

void Zero1Optimizer::sync_grads() {
  run_grad_sums(params_);  // on the full gradient, while it exists
  // BEGIN ASSIGNMENT zero.stage1
  for (const auto& b : layout_.buckets) {
    auto mine = slice_of(grad_, b);                                                          // [bucket padded / N]
    group_.reduce_scatter(mine, flat_grad_.narrow(0, b.offset, b.padded), ReduceOp::kAvg, carries("ZeRO: a bucket of "
                          "gradients, averaged, each rank keeping its slice"));
  }
  // END ASSIGNMENT
  average_over_replicas();
}

void Zero1Optimizer::average_over_replicas() {
  if (!groups_.replicated()) return;
  Comm& replicas = groups_.replicas();
  // BEGIN ASSIGNMENT zero.hsdp
  // [P_pad / N]: my shard group's average -> the whole group's
  replicas.all_reduce(grad_, ReduceOp::kAvg, carries("HSDP: my slice of the gradient, averaged over the replicas "
                                                     "that hold the same slice"));
  // END ASSIGNMENT
}

double Zero1Optimizer::grad_norm(Comm& world, const MeshCoords& /*here: fixed in the runs*/) {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({1}, grad_.options().dtype(torch::kFloat64));  // [1]
  for (const auto& runs : runs_)
    for (const auto& run : runs)
      if (run.counts) sum += grad_.narrow(0, run.offset, run.length).norm().to(torch::kFloat64).square();
  world.all_reduce(sum, ReduceOp::kSum, carries("the global gradient norm: each rank's sum of squares"));
  return std::sqrt(sum.item<double>());
}

void Zero1Optimizer::step(double lr, double c) {
  // AdamW::step, elementwise on my slice (see picotron/optim.h for the math). Offload:
  // the gradient slice goes down to the CPU (one copy), AdamW runs there bucket by bucket,
  // and each bucket's updated weights go up without waiting while the CPU does the next.
  torch::NoGradGuard no_grad;
  if (offload_) host_grad_.copy_(grad_);  // device -> pinned host, waits for the gradients
  ++t_;
  const double b1 = opts_.beta1, b2 = opts_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(t_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(t_)));
  const double decayed = 1.0 - lr * opts_.weight_decay;
  for (size_t i = 0; i < layout_.buckets.size(); ++i) {  // my part of each bucket
    const auto& b = layout_.buckets[i];
    const auto g = slice_of(offload_ ? host_grad_ : grad_, b);
    auto m = slice_of(exp_avg_, b), v = slice_of(exp_avg_sq_, b);
    auto w = master_in_place_ ? my_params(i) : slice_of(master_, b);  // fp32/fp64: the parameters themselves
    if (c == 1.0) m.lerp_(g, 1.0 - b1);
    else m.mul_(b1).add_(g, (1.0 - b1) * c);
    v.mul_(b2).addcmul_(g, g, (1.0 - b2) * c * c);
    if (opts_.weight_decay != 0)
      for (const auto& run : runs_[i])  // matrices only
        if (run.decay) w.narrow(0, run.offset - b.shard_offset, run.length).mul_(decayed);
    auto denom = v.sqrt().div_(bias2_sqrt).add_(opts_.eps);
    w.addcdiv_(m, denom, -lr / bias1);
    publish(i, w);
  }
}

void Zero1Optimizer::publish(size_t i, const torch::Tensor& w) {
  // Everyone's updated part into everyone's parameters. (The input is a copy: MPI forbids
  // overlapping send and receive buffers.)
  // BEGIN ASSIGNMENT zero.stage1
  auto& everyone = bucket_param_[i];  // [bucket padded]
  const auto mine = w.to(everyone.device(), everyone.scalar_type(), /*non_blocking=*/offload_, /*copy=*/true);
  group_.all_gather(everyone, mine, carries("ZeRO: every rank's updated slice, to everyone"));  // [padded / N] -> [padded]
  // END ASSIGNMENT
}

std::map<std::string, torch::Tensor> Zero1Optimizer::masters_by_name() {
  auto full = torch::empty({layout_.padded}, grad_.options());  // [P_pad] fp32 (fp64)
  for (size_t i = 0; i < layout_.buckets.size(); ++i) {
    const auto& b = layout_.buckets[i];
    auto out = full.narrow(0, b.offset, b.padded);
    const auto mine = master_in_place_ ? my_params(i) : slice_of(master_, b);
    const auto copy = mine.to(full.device(), full.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    group_.all_gather(out, copy, carries("ZeRO: every rank's slice of the master weights, for a whole copy"));
  }
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i)
    out[params_[i].name] = full.narrow(0, layout_.offsets[i], params_[i].param.numel()).view(params_[i].param.sizes());
  return out;
}

std::map<std::string, torch::Tensor> Zero1Optimizer::weights_by_name() {
  std::map<std::string, torch::Tensor> out;
  for (auto& p : params_) out[p.name] = p.param;  // whole on every rank of the group
  return out;
}

torch::Tensor Zero1Optimizer::master_piece(const ZeroLayout::Piece& piece) const {
  if (!master_in_place_) return master_.narrow(0, piece.slice_offset, piece.length);
  return weights_piece(piece);  // fp32/fp64: the weights are the masters
}

torch::Tensor Zero1Optimizer::weights_piece(const ZeroLayout::Piece& piece) const {
  return params_[piece.param].param.view({-1}).narrow(0, piece.first, piece.length);
}

std::vector<StatePiece> Zero1Optimizer::owned_state(const MeshCoords& here) {
  // My flat slice of the cp x dp group; tp and pp replicas (norms over tp) skip, and so
  // (HSDP) do the replicas of my slice in the other shard groups.
  if (groups_.replica() != 0) return {};
  MeshCoords group_blind = here;
  group_blind.dp = group_blind.cp = 0;
  std::vector<StatePiece> out;
  for (const auto& piece : layout_.pieces(group_.rank())) {
    const auto& p = params_[piece.param];
    if (!p.record.counts_once(group_blind)) continue;
    const torch::Tensor state[] = {master_piece(piece), exp_avg_.narrow(0, piece.slice_offset, piece.length),
                                   exp_avg_sq_.narrow(0, piece.slice_offset, piece.length)};
    for (int k = 0; k < 3; ++k)
      out.push_back({p.name + "/" + kStateKinds[k], p.record, piece.first, piece.length, state[k]});
  }
  return out;
}

void Zero1Optimizer::load_state(const StateReader& read) {
  // My pieces of master and moments; stages 1 and 2 also keep whole (local) weights, the
  // rounding of the whole master. One parameter and one kind at a time (the reader holds
  // one assembled tensor).
  torch::NoGradGuard no_grad;
  std::vector<std::vector<ZeroLayout::Piece>> pieces_of(params_.size());
  for (const auto& piece : layout_.pieces(group_.rank())) pieces_of[piece.param].push_back(piece);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    if (keeps_whole_parameters()) p.param.copy_(read(p.name + "/master", p.record, 0, -1).view(p.param.sizes()));
    for (const auto& piece : pieces_of[i]) {
      const auto master = read(p.name + "/master", p.record, piece.first, piece.length);
      master_piece(piece).copy_(master);
      if (!keeps_whole_parameters()) weights_piece(piece).copy_(master);  // my shard of the weights
    }
    for (const auto& piece : pieces_of[i])
      exp_avg_.narrow(0, piece.slice_offset, piece.length)
          .copy_(read(p.name + "/exp_avg", p.record, piece.first, piece.length));
    for (const auto& piece : pieces_of[i])
      exp_avg_sq_.narrow(0, piece.slice_offset, piece.length)
          .copy_(read(p.name + "/exp_avg_sq", p.record, piece.first, piece.length));
  }
}

Zero1Optimizer::Bytes Zero1Optimizer::bytes() const {
  const int64_t state = int64_t(grad_.element_size());
  const int64_t param_elements = keeps_whole_parameters() ? layout_.padded : layout_.shard;
  // Stage 1 keeps the full gradient AND my slice of its average (the reduce-scatter cannot
  // write into its own input); stages 2 and 3 only the slice.
  const int64_t grad_elements = flat_grad_.defined() ? layout_.padded + layout_.shard : layout_.shard;
  return {param_elements * int64_t(bucket_param_.front().element_size()), grad_elements * state,
          master_in_place_ ? 0 : layout_.shard * state, 2 * layout_.shard * state, offload_};
}

std::string Zero1Optimizer::summary() const {
  const Bytes b = bytes();
  const std::string n = std::to_string(layout_.ranks);
  // over the group's name: cp_dp (expert parallelism's experts: ep_replicas)
  const std::string hybrid = groups_.describe();
  return "zero-" + std::to_string(stage_) + " over " + (hybrid.empty() ? group_.name() + " = " + n + " ranks" : groups_.whole_name() + ", " + hybrid) +
         "; rank " + std::to_string(group_.rank()) +
         " holds parameters " + human_bytes(double(b.params)) + ", gradients " + human_bytes(double(b.grads)) +
         ", master weights " + (b.master ? human_bytes(double(b.master)) : std::string("(the parameters themselves)")) +
         ", AdamW moments " + human_bytes(double(b.optimizer)) + " (a 1/" + n + " slice" +
         (b.offloaded ? "; master and moments in pinned CPU memory" : "") + ")";
}

}  // namespace picotron
