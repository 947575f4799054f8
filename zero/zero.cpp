// zero/zero.cpp — ZeroOptimizer: the bucket parameters, gradients into my slice (stages 1
// and 2; stage 3 too), the norm, AdamW on my slice. The layout: zero_layout.cpp; stage 3's
// gather / release: zero3.cpp. See zero.h for the picture and the costs.
#include "zero/zero.h"

#include "picotron/utils.h"

#include <algorithm>
#include <cmath>

namespace picotron {

ZeroOptimizer::ZeroOptimizer(Comm& group, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                             AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, int stage,
                             double bucket_mb, bool offload)
    : group_(group), opts_(opts), stage_(stage), offload_(offload) {
  TORCH_CHECK(!named_params.empty(), "zero: no parameters");
  TORCH_CHECK(stage >= 1 && stage <= 3, "zero: stage ", stage, " does not exist (1, 2 or 3)");
  torch::NoGradGuard no_grad;
  const auto compute = named_params.front().second.options();
  const auto state_dtype = compute.dtype() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  std::vector<int64_t> numels;
  for (const auto& [name, p] : named_params) numels.push_back(p.numel());
  // Buckets bound every temporary buffer (and, in stage 2, what is in flight). Stage 3:
  // one bucket per unit, whatever its size (a unit is gathered whole).
  std::vector<int> unit_ids;
  if (stage == 3) {
    for (const auto& [name, p] : named_params) {
      const std::string unit = zero3_unit(name);
      if (units_.empty() || units_.back().name != unit) {
        for (const auto& u : units_)
          TORCH_CHECK(u.name != unit, "zero-3: the parameters of ", unit, " are not consecutive (", name, ")");
        units_.push_back(Unit{unit, Held::kGathered, std::nullopt});
      }
      unit_ids.push_back(int(units_.size()) - 1);
    }
  }
  const int64_t capacity = stage == 3 ? INT64_MAX
      : std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / int64_t(c10::elementSize(state_dtype)));
  layout_ = zero_layout(numels, group.size(), capacity, unit_ids);

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
  if (stage == 3) {  // my part of every unit, kept for good; the units themselves come and go
    shard_param_ = torch::empty({layout_.shard}, compute);  // [P_pad / N]
    const int64_t r = group.rank();
    for (size_t b = 0; b < layout_.buckets.size(); ++b) {
      const int64_t part = layout_.buckets[b].padded / group.size();
      slice_of(shard_param_, layout_.buckets[b]).copy_(bucket_param_[b].narrow(0, r * part, part));
    }
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
  // Where the optimizer lives: with the parameters, or (offload) in CPU memory, pinned when
  // the parameters are on a GPU so that copies to and from it can run asynchronously.
  const auto optimizer_at = offload ? torch::TensorOptions().dtype(state_dtype).device(torch::kCPU)
                                          .pinned_memory(compute.device().is_cuda())
                                    : grad_.options();
  master_in_place_ = !offload && compute.dtype() == state_dtype;  // fp32/fp64: the parameters are the masters
  if (!master_in_place_) {
    master_ = torch::empty({layout_.shard}, optimizer_at);
    for (size_t b = 0; b < layout_.buckets.size(); ++b) slice_of(master_, layout_.buckets[b]).copy_(my_params(b));
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
    // Each dp/cp rank holds a different slice now: only tp / pp copies can repeat an element.
    ShardRecord r = p.record;
    auto& axes = r.replica_axes;
    axes.erase(std::remove_if(axes.begin(), axes.end(), [](Axis a) { return a == Axis::kDp || a == Axis::kCp; }),
               axes.end());
    const Run run{piece.slice_offset, piece.length, p.decay, r.counts_once(here)};
    auto& runs = runs_[bucket];
    if (!runs.empty() && runs.back().offset + runs.back().length == run.offset && runs.back().decay == run.decay &&
        runs.back().counts == run.counts)
      runs.back().length += run.length;
    else
      runs.push_back(run);
  }

  if (stage >= 2) {  // a hook on each parameter's gradient accumulator (see data_parallel.cpp)
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

ZeroOptimizer::~ZeroOptimizer() {  // the hooks (they capture `this`) go with the members
  if (model_) {  // the runners we installed point at us
    model_->layer_runner = inner_layer_runner_;
    model_->part_runner = inner_part_runner_;
  }
}

torch::Tensor ZeroOptimizer::slice_of(const torch::Tensor& shard_buffer, const ZeroLayout::Bucket& b) const {
  return shard_buffer.narrow(0, b.shard_offset, b.padded / layout_.ranks);  // my part of bucket b
}

torch::Tensor ZeroOptimizer::my_params(size_t b) const {
  if (stage_ == 3) return slice_of(shard_param_, layout_.buckets[b]);  // the only copy of my part
  const int64_t part = layout_.buckets[b].padded / layout_.ranks;
  return bucket_param_[b].narrow(0, group_.rank() * part, part);  // my part of bucket b's parameters
}

void ZeroOptimizer::zero_main_grads() {
  grad_.zero_();
  if (stage_ >= 2) return;  // no full gradient to zero
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
  TORCH_CHECK(stage_ != 3 || model_, "zero-3: attach(model) before the first forward");
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
    if (stage_ == 3) release(b);  // the unit's backward is over: its parameters go
    launch_ready_buckets();
  }
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
  for (size_t u = 0; u < units_.size(); ++u) release(u);  // stage 3: a unit no gradient reached
  prepare_backward();
}

void ZeroOptimizer::reduce_scatter_grads() {
  if (stage_ != 1) return;  // stages 2 and 3 did it during backward
  for (const auto& b : layout_.buckets) {
    auto mine = slice_of(grad_, b);                                 // [bucket padded / N]
    group_.reduce_scatter(mine, flat_grad_.narrow(0, b.offset, b.padded), ReduceOp::kAvg);  // averaged
  }
}

double ZeroOptimizer::grad_norm(Comm& world) const {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({1}, grad_.options().dtype(torch::kFloat64));  // [1]
  for (const auto& runs : runs_)
    for (const auto& run : runs)
      if (run.counts) sum += grad_.narrow(0, run.offset, run.length).norm().to(torch::kFloat64).square();
  world.all_reduce(sum, ReduceOp::kSum);
  return std::sqrt(sum.item<double>());
}

void ZeroOptimizer::step(double lr, double c) {
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
    if (stage_ == 3) {  // my shard is all I keep: the next forward gathers it
      if (!master_in_place_) my_params(i).copy_(w, /*non_blocking=*/offload_);  // master -> compute-dtype shard
      continue;
    }
    // Everyone's updated part into everyone's parameters. (The input is a copy: MPI
    // forbids overlapping send and receive buffers.)
    auto& everyone = bucket_param_[i];  // [bucket padded]
    const auto mine = w.to(everyone.device(), everyone.scalar_type(), /*non_blocking=*/offload_, /*copy=*/true);
    group_.all_gather(everyone, mine);
  }
}

std::map<std::string, torch::Tensor> ZeroOptimizer::full_masters() {
  auto full = torch::empty({layout_.padded}, grad_.options());  // [P_pad] fp32 (fp64)
  for (size_t i = 0; i < layout_.buckets.size(); ++i) {
    const auto& b = layout_.buckets[i];
    auto out = full.narrow(0, b.offset, b.padded);
    const auto mine = master_in_place_ ? my_params(i) : slice_of(master_, b);
    group_.all_gather(out, mine.to(full.device(), full.scalar_type(), /*non_blocking=*/false, /*copy=*/true));
  }
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i)
    out[params_[i].name] = full.narrow(0, layout_.offsets[i], params_[i].param.numel()).view(params_[i].param.sizes());
  return out;
}

ZeroOptimizer::Bytes ZeroOptimizer::bytes() const {
  const int64_t state = int64_t(grad_.element_size());
  const int64_t param_elements = stage_ == 3 ? layout_.shard : layout_.padded;
  // Stage 1 keeps the full gradient AND my slice of its average (the reduce-scatter cannot
  // write into its own input); stages 2 and 3 only the slice.
  const int64_t grad_elements = stage_ == 1 ? layout_.padded + layout_.shard : layout_.shard;
  return {param_elements * int64_t(bucket_param_.front().element_size()), grad_elements * state,
          master_in_place_ ? 0 : layout_.shard * state, 2 * layout_.shard * state, offload_};
}

std::string ZeroOptimizer::summary() const {
  const Bytes b = bytes();
  const std::string n = std::to_string(layout_.ranks);
  return "zero-" + std::to_string(stage_) + " over cp x dp = " + n + " ranks; rank " + std::to_string(group_.rank()) +
         " holds parameters " + human_bytes(double(b.params)) + ", gradients " + human_bytes(double(b.grads)) +
         ", master weights " + (b.master ? human_bytes(double(b.master)) : std::string("(the parameters themselves)")) +
         ", AdamW moments " + human_bytes(double(b.optimizer)) + " (a 1/" + n + " slice" +
         (b.offloaded ? "; master and moments in pinned CPU memory" : "") + ")";
}

torch::Tensor ZeroOptimizer::master_piece(const ZeroLayout::Piece& piece) const {
  if (!master_in_place_) return master_.narrow(0, piece.slice_offset, piece.length);
  return weights_piece(piece);  // fp32/fp64: the weights are the masters
}

torch::Tensor ZeroOptimizer::weights_piece(const ZeroLayout::Piece& piece) const {
  if (stage_ == 3) return shard_param_.narrow(0, piece.slice_offset, piece.length);
  return params_[piece.param].param.view({-1}).narrow(0, piece.first, piece.length);
}

}  // namespace picotron
