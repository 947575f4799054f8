// zero/zero.cpp — see zero.h for the picture and the costs.
#include "zero/zero.h"

#include <algorithm>
#include <cmath>

namespace picotron {

ZeroLayout zero_layout(const std::vector<int64_t>& numels, int N) {
  ZeroLayout l;
  for (int64_t n : numels) {
    l.offsets.push_back(l.numel);
    l.numel += n;
  }
  l.padded = (l.numel + N - 1) / N * N;  // the last slice ends in zeros that nobody owns
  l.shard = l.padded / N;
  return l;
}

std::vector<ZeroLayout::Piece> ZeroLayout::pieces(int rank) const {
  std::vector<Piece> out;
  const int64_t lo = rank * shard, hi = lo + shard;  // my slice [lo, hi) of the flat buffer
  for (size_t i = 0; i < offsets.size(); ++i) {
    const int64_t begin = offsets[i], end = i + 1 < offsets.size() ? offsets[i + 1] : numel;
    const int64_t a = std::max(begin, lo), b = std::min(end, hi);
    if (a < b) out.push_back({i, a - begin, b - a, a - lo});
  }
  return out;
}

ZeroOptimizer::ZeroOptimizer(Comm& group, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                             AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here)
    : group_(group), opts_(opts) {
  TORCH_CHECK(!named_params.empty(), "zero: no parameters");
  torch::NoGradGuard no_grad;
  std::vector<int64_t> numels;
  for (const auto& [name, p] : named_params) numels.push_back(p.numel());
  layout_ = zero_layout(numels, group.size());

  // The flat parameters; each model tensor becomes a view of its range (values kept).
  const auto compute = named_params.front().second.options();
  const auto state_dtype = compute.dtype() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  flat_param_ = torch::zeros({layout_.padded}, compute);                             // [P_pad]
  flat_grad_ = torch::zeros({layout_.padded}, compute.dtype(state_dtype));           // [P_pad]
  for (size_t i = 0; i < named_params.size(); ++i) {
    const auto& [name, p] = named_params[i];
    TORCH_CHECK(p.options().dtype() == compute.dtype() && p.device() == compute.device(),
                "zero: every parameter must share one dtype and device (", name, ")");
    auto range = flat_param_.narrow(0, layout_.offsets[i], p.numel());
    range.copy_(p.reshape({-1}));
    p.set_data(range.view(p.sizes()));  // the module's tensor now lives in the flat buffer
    TrainableParam tp;
    tp.name = name;
    tp.param = p;
    tp.main_grad = flat_grad_.narrow(0, layout_.offsets[i], p.numel()).view(p.sizes());
    if (p.scalar_type() == state_dtype) tp.master = p;  // marks "param.grad is main_grad" (aliases_grad)
    tp.decay = p.dim() >= 2;
    const auto it = plan.find(name);
    TORCH_CHECK(it != plan.end(), "zero: parameter ", name, " has no shard record");
    tp.record = it->second;
    params_.push_back(std::move(tp));
  }

  // My slice: gradient, master, moments, and the per-element rules.
  const int64_t lo = group.rank() * layout_.shard;
  grad_ = torch::zeros({layout_.shard}, flat_grad_.options());
  master_in_place_ = flat_param_.scalar_type() == state_dtype;  // fp32/fp64: the parameters are the masters
  master_ = master_in_place_ ? flat_param_.narrow(0, lo, layout_.shard)
                             : flat_param_.narrow(0, lo, layout_.shard).to(state_dtype);
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
  zero_main_grads();
}

void ZeroOptimizer::zero_main_grads() {
  flat_grad_.zero_();
  for (auto& p : params_)
    if (p.aliases_grad()) p.param.mutable_grad() = p.main_grad;  // autograd accumulates in place
}

void ZeroOptimizer::accumulate_grads() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    auto& g = p.param.mutable_grad();
    if (!g.defined() || g.is_same(p.main_grad)) continue;
    p.main_grad.add_(g);  // bf16 -> fp32
    g = torch::Tensor();
  }
}

void ZeroOptimizer::reduce_scatter_grads() {
  group_.reduce_scatter(grad_, flat_grad_, ReduceOp::kAvg);  // [P_pad] -> my [P_pad / N], averaged
}

double ZeroOptimizer::grad_norm(Comm& world) const {
  torch::NoGradGuard no_grad;
  auto sum = (grad_ * counts_).norm().to(torch::kFloat64).square().reshape({1});  // [1]
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
  if (c == 1.0) exp_avg_.lerp_(grad_, 1.0 - b1);
  else exp_avg_.mul_(b1).add_(grad_, (1.0 - b1) * c);
  exp_avg_sq_.mul_(b2).addcmul_(grad_, grad_, (1.0 - b2) * c * c);
  if (opts_.weight_decay != 0)  // matrices only: the same factor AdamW uses, 1 elsewhere
    master_.mul_(torch::ones_like(master_).masked_fill_(decay_, 1.0 - lr * opts_.weight_decay));
  auto denom = exp_avg_sq_.sqrt().div_(bias2_sqrt).add_(opts_.eps);
  master_.addcdiv_(exp_avg_, denom, -lr / bias1);
  // Everyone's updated slice into everyone's parameters. (The input must be a separate
  // buffer: MPI forbids overlapping send and receive buffers.)
  group_.all_gather(flat_param_, master_.to(flat_param_.scalar_type(), /*non_blocking=*/false, /*copy=*/true));
}

std::map<std::string, torch::Tensor> ZeroOptimizer::full_masters() {
  auto full = torch::empty({layout_.padded}, master_.options());  // [P_pad]
  group_.all_gather(full, master_.clone());
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i)
    out[params_[i].name] = full.narrow(0, layout_.offsets[i], params_[i].param.numel()).view(params_[i].param.sizes());
  return out;
}

ZeroOptimizer::Bytes ZeroOptimizer::bytes() const {
  const int64_t state = int64_t(grad_.element_size());
  return {layout_.padded * int64_t(flat_param_.element_size()), layout_.padded * state,
          master_in_place_ ? 0 : layout_.shard * state, 2 * layout_.shard * state};
}

}  // namespace picotron
