// zero/zero.cpp — see zero.h for the picture and the costs.
#include "zero/zero.h"

#include <algorithm>
#include <cmath>

namespace picotron {

ZeroLayout zero_layout(const std::vector<int64_t>& numels, int N, int64_t bucket_capacity) {
  ZeroLayout l;
  l.ranks = N;
  l.offsets.resize(numels.size());
  // Consecutive parameters fill a bucket up to the capacity (a bigger one gets its own);
  // each bucket is padded to a multiple of N with zeros that nobody owns.
  for (size_t i = 0; i < numels.size(); ++i) {
    const bool full = !l.buckets.empty() && l.buckets.back().numel > 0 &&
                      l.buckets.back().numel + numels[i] > bucket_capacity;
    if (l.buckets.empty() || full) l.buckets.push_back({i, i, 0, 0, 0, 0});
    auto& b = l.buckets.back();
    b.end_param = i + 1;
    b.numel += numels[i];
    l.numel += numels[i];
  }
  for (auto& b : l.buckets) {
    b.offset = l.padded;
    b.padded = (b.numel + N - 1) / N * N;
    b.shard_offset = l.shard;
    int64_t at = b.offset;
    for (size_t i = b.first_param; i < b.end_param; ++i) l.offsets[i] = at, at += numels[i];
    l.padded += b.padded;
    l.shard += b.padded / N;
  }
  return l;
}

std::vector<ZeroLayout::Piece> ZeroLayout::pieces(int rank) const {
  std::vector<Piece> out;
  for (const auto& b : buckets) {
    const int64_t slice = b.padded / ranks;                        // each rank's part of this bucket
    const int64_t lo = b.offset + rank * slice, hi = lo + slice;  // mine: [lo, hi) of the flat buffer
    for (size_t i = b.first_param; i < b.end_param; ++i) {
      const int64_t begin = offsets[i], end = i + 1 < b.end_param ? offsets[i + 1] : b.offset + b.numel;
      const int64_t x = std::max(begin, lo), y = std::min(end, hi);
      if (x < y) out.push_back({i, x - begin, y - x, b.shard_offset + (x - lo)});
    }
  }
  return out;
}

ZeroOptimizer::ZeroOptimizer(Comm& group, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                             AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, int stage,
                             double bucket_mb)
    : group_(group), opts_(opts), stage_(stage) {
  TORCH_CHECK(!named_params.empty(), "zero: no parameters");
  TORCH_CHECK(stage == 1 || stage == 2, "zero: stage ", stage, " is not implemented");
  torch::NoGradGuard no_grad;
  const auto compute = named_params.front().second.options();
  const auto state_dtype = compute.dtype() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  std::vector<int64_t> numels;
  for (const auto& [name, p] : named_params) numels.push_back(p.numel());
  // Buckets bound every temporary buffer (and, in stage 2, what is in flight).
  const int64_t capacity = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / int64_t(c10::elementSize(state_dtype)));
  layout_ = zero_layout(numels, group.size(), capacity);

  // The flat parameters; each model tensor becomes a view of its range (values kept).
  flat_param_ = torch::zeros({layout_.padded}, compute);  // [P_pad]
  for (size_t i = 0; i < named_params.size(); ++i) {
    const auto& [name, p] = named_params[i];
    TORCH_CHECK(p.options().dtype() == compute.dtype() && p.device() == compute.device(),
                "zero: every parameter must share one dtype and device (", name, ")");
    auto range = flat_param_.narrow(0, layout_.offsets[i], p.numel());
    range.copy_(p.reshape({-1}));
    p.set_data(range.view(p.sizes()));  // the module's tensor now lives in the flat buffer (its old one is freed)
  }
  if (stage == 1) flat_grad_ = torch::zeros({layout_.padded}, compute.dtype(state_dtype));  // [P_pad]
  for (size_t i = 0; i < named_params.size(); ++i) {
    const auto& [name, p] = named_params[i];
    TrainableParam tp;
    tp.name = name;
    tp.param = p;
    if (stage == 1) {
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
  master_in_place_ = flat_param_.scalar_type() == state_dtype;  // fp32/fp64: the parameters are the masters
  if (!master_in_place_) {
    master_ = torch::empty_like(grad_);
    for (const auto& b : layout_.buckets) slice_of(master_, b).copy_(my_params(b));
  }
  exp_avg_ = torch::zeros_like(grad_);
  exp_avg_sq_ = torch::zeros_like(grad_);
  decay_ = torch::zeros({layout_.shard}, torch::TensorOptions().dtype(torch::kBool).device(compute.device()));
  counts_ = torch::zeros_like(grad_);
  for (const auto& piece : layout_.pieces(group.rank())) {
    const auto& p = params_[piece.param];
    decay_.narrow(0, piece.slice_offset, piece.length).fill_(p.decay);
    // Each dp/cp rank holds a different slice now: only tp / pp copies can repeat an element.
    ShardRecord r = p.record;
    auto& axes = r.replica_axes;
    axes.erase(std::remove_if(axes.begin(), axes.end(), [](Axis a) { return a == Axis::kDp || a == Axis::kCp; }),
               axes.end());
    counts_.narrow(0, piece.slice_offset, piece.length).fill_(r.counts_once(here) ? 1.0 : 0.0);
  }

  if (stage == 2) {  // a hook on each parameter's gradient accumulator (see data_parallel.cpp)
    inflight_.resize(layout_.buckets.size());
    for (size_t b = 0; b < layout_.buckets.size(); ++b)
      for (size_t i = layout_.buckets[b].first_param; i < layout_.buckets[b].end_param; ++i) bucket_of_.push_back(b);
    hooks_.reserve(params_.size());
    for (size_t i = 0; i < params_.size(); ++i)
      hooks_.emplace_back(params_[i].param, params_[i].name, [this, i] { on_grad_ready(i); });
  }
  zero_main_grads();
  prepare_backward();
}

ZeroOptimizer::~ZeroOptimizer() = default;  // the hooks (they capture `this`) go first

torch::Tensor ZeroOptimizer::slice_of(const torch::Tensor& shard_buffer, const ZeroLayout::Bucket& b) const {
  return shard_buffer.narrow(0, b.shard_offset, b.padded / layout_.ranks);  // my part of bucket b
}

torch::Tensor ZeroOptimizer::my_params(const ZeroLayout::Bucket& b) const {
  const int64_t part = b.padded / layout_.ranks;
  return flat_param_.narrow(0, b.offset + group_.rank() * part, part);  // my part of bucket b's parameters
}

void ZeroOptimizer::zero_main_grads() {
  grad_.zero_();
  if (stage_ == 2) return;  // no full gradient to zero
  flat_grad_.zero_();
  for (auto& p : params_)
    if (p.aliases_grad()) p.param.mutable_grad() = p.main_grad;  // autograd accumulates in place
}

void ZeroOptimizer::prepare_backward() {
  for (size_t b = 0; b < inflight_.size(); ++b)
    inflight_[b].pending = int(layout_.buckets[b].end_param - layout_.buckets[b].first_param);
  next_to_launch_ = int(inflight_.size()) - 1;
}

void ZeroOptimizer::on_grad_ready(size_t i) {
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
  if (--f.pending == 0) launch_ready_buckets();
}

void ZeroOptimizer::launch_ready_buckets() {
  // Backward completes the last bucket first; every rank launches in the same order.
  while (next_to_launch_ >= 0 && inflight_[size_t(next_to_launch_)].pending == 0) {
    auto& f = inflight_[size_t(next_to_launch_)];
    const auto& bucket = layout_.buckets[size_t(next_to_launch_)];
    if (!f.full.defined()) f.full = torch::zeros({bucket.padded}, grad_.options());
    f.mine = torch::empty({bucket.padded / layout_.ranks}, grad_.options());
    record("launch bucket " + std::to_string(next_to_launch_));
    f.work = group_.reduce_scatter_async(f.mine, f.full, ReduceOp::kAvg);  // [padded] -> my [padded / N]
    launched_.push_back(size_t(next_to_launch_));
    --next_to_launch_;
  }
  // At most two buckets in flight: the older ones are waited for and added into my slice,
  // so the full buffers of a whole gradient never exist at once.
  while (launched_.size() > 2) finish_oldest();
}

void ZeroOptimizer::finish_oldest() {
  const size_t b = launched_.front();
  launched_.pop_front();
  auto& f = inflight_[b];
  f.work->wait();
  slice_of(grad_, layout_.buckets[b]).add_(f.mine);  // this micro-batch's average of my part
  f.full = f.mine = torch::Tensor();                  // the bucket's buffers go
  f.work.reset();
}

void ZeroOptimizer::accumulate_grads() {
  torch::NoGradGuard no_grad;
  if (stage_ == 1) {
    for (auto& p : params_) {
      auto& g = p.param.mutable_grad();
      if (!g.defined() || g.is_same(p.main_grad)) continue;
      p.main_grad.add_(g);  // bf16 -> fp32
      g = torch::Tensor();
    }
    return;
  }
  record("backward end");
  for (auto& f : inflight_) f.pending = 0;  // a parameter without a gradient: send its bucket anyway
  launch_ready_buckets();
  while (!launched_.empty()) finish_oldest();
  prepare_backward();
}

void ZeroOptimizer::reduce_scatter_grads() {
  if (stage_ != 1) return;  // stage 2 did it during backward
  for (const auto& b : layout_.buckets) {
    auto mine = slice_of(grad_, b);                                 // [bucket padded / N]
    group_.reduce_scatter(mine, flat_grad_.narrow(0, b.offset, b.padded), ReduceOp::kAvg);  // averaged
  }
}

double ZeroOptimizer::grad_norm(Comm& world) const {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({1}, grad_.options().dtype(torch::kFloat64));  // [1]
  for (const auto& b : layout_.buckets)  // bucket by bucket: no slice-sized temporary
    sum += (slice_of(grad_, b) * slice_of(counts_, b)).norm().to(torch::kFloat64).square();
  world.all_reduce(sum, ReduceOp::kSum);
  return std::sqrt(sum.item<double>());
}

void ZeroOptimizer::step(double lr, double c) {
  // AdamW::step, elementwise on my slice (see picotron/optim.h for the math).
  torch::NoGradGuard no_grad;
  ++t_;
  const double b1 = opts_.beta1, b2 = opts_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(t_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(t_)));
  const double decayed = 1.0 - lr * opts_.weight_decay;
  for (const auto& b : layout_.buckets) {  // my part of each bucket
    const auto g = slice_of(grad_, b), decay = slice_of(decay_, b);
    auto m = slice_of(exp_avg_, b), v = slice_of(exp_avg_sq_, b);
    auto w = master_in_place_ ? my_params(b) : slice_of(master_, b);  // fp32/fp64: the parameters themselves
    if (c == 1.0) m.lerp_(g, 1.0 - b1);
    else m.mul_(b1).add_(g, (1.0 - b1) * c);
    v.mul_(b2).addcmul_(g, g, (1.0 - b2) * c * c);
    if (opts_.weight_decay != 0) w.mul_(torch::ones_like(w).masked_fill_(decay, decayed));  // matrices only
    auto denom = v.sqrt().div_(bias2_sqrt).add_(opts_.eps);
    w.addcdiv_(m, denom, -lr / bias1);
    // Everyone's updated part into everyone's parameters. (The input is a copy: MPI
    // forbids overlapping send and receive buffers.)
    auto everyone = flat_param_.narrow(0, b.offset, b.padded);  // [bucket padded]
    const auto mine = w.to(flat_param_.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    group_.all_gather(everyone, mine);
  }
}

std::map<std::string, torch::Tensor> ZeroOptimizer::full_masters() {
  auto full = torch::empty({layout_.padded}, grad_.options());  // [P_pad] fp32 (fp64)
  for (const auto& b : layout_.buckets) {
    auto out = full.narrow(0, b.offset, b.padded);
    group_.all_gather(out, (master_in_place_ ? my_params(b) : slice_of(master_, b)).to(full.scalar_type(), false, true));
  }
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i)
    out[params_[i].name] = full.narrow(0, layout_.offsets[i], params_[i].param.numel()).view(params_[i].param.sizes());
  return out;
}

ZeroOptimizer::Bytes ZeroOptimizer::bytes() const {
  const int64_t state = int64_t(grad_.element_size());
  return {layout_.padded * int64_t(flat_param_.element_size()), (stage_ == 1 ? layout_.padded : layout_.shard) * state,
          master_in_place_ ? 0 : layout_.shard * state, 2 * layout_.shard * state};
}

}  // namespace picotron
