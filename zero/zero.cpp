// zero/zero.cpp — see zero.h for the picture and the costs.
#include "zero/zero.h"

#include <algorithm>
#include <cmath>

namespace picotron {

ZeroLayout zero_layout(const std::vector<int64_t>& numels, int N, int64_t bucket_capacity,
                       const std::vector<int>& units) {
  TORCH_CHECK(units.empty() || units.size() == numels.size(), "zero_layout: one unit id per parameter");
  ZeroLayout l;
  l.ranks = N;
  l.offsets.resize(numels.size());
  // Consecutive parameters fill a bucket up to the capacity (a bigger one gets its own)
  // or until the unit changes; each bucket is padded to a multiple of N with zeros that
  // nobody owns.
  for (size_t i = 0; i < numels.size(); ++i) {
    const bool full = !l.buckets.empty() && l.buckets.back().numel > 0 &&
                      l.buckets.back().numel + numels[i] > bucket_capacity;
    const bool new_unit = !units.empty() && i > 0 && units[i] != units[i - 1];
    if (l.buckets.empty() || full || new_unit) l.buckets.push_back({i, i, 0, 0, 0, 0});
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

std::string zero3_unit(const std::string& name) {
  const std::string layers = "model.layers.";
  if (name.rfind(layers, 0) == 0) return "layer " + name.substr(layers.size(), name.find('.', layers.size()) - layers.size());
  if (name.rfind("model.embed_tokens.", 0) == 0) return "embedding";
  return "head";  // model.norm.weight, lm_head.weight
}

// Stage 3 frees a unit's parameters without touching the tensors: the storage all their
// views share (also the views autograd saved for backward) drops its bytes, and gets new
// ones from the same allocator before the next gather refills it.
static void drop_storage(const torch::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));  // the old bytes are freed here
  storage->set_nbytes(0);
}
static void refill_storage(const torch::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  const size_t bytes = size_t(t.numel()) * t.element_size();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
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

// ---- stage 3: gather, compute, release -------------------------------------------------

void ZeroOptimizer::attach(LlamaForCausalLM& model) {
  TORCH_CHECK(stage_ == 3, "zero: attach() is for stage 3 (stage ", stage_, " keeps the whole parameters)");
  TORCH_CHECK(!model_, "zero-3: attach() twice");
  const auto unit_index = [&](const std::string& name) -> std::optional<size_t> {
    for (size_t u = 0; u < units_.size(); ++u)
      if (units_[u].name == name) return u;
    return std::nullopt;
  };
  // The passes of a forward, in order, and the units each computes with.
  if (const auto u = unit_index("embedding")) {
    part_pass_["embed"] = passes_.size();
    passes_.push_back({"embedding", {*u}});
  }
  for (const auto& [index, layer] : model->model->layers->items) {
    const auto u = unit_index("layer " + std::to_string(index));
    TORCH_CHECK(u, "zero-3: decoder layer ", index, " has no parameters here");
    layer_pass_[index] = passes_.size();
    passes_.push_back({"layer " + std::to_string(index), {*u}});
  }
  if (const auto u = unit_index("head")) {
    part_pass_["head"] = passes_.size();
    passes_.push_back({"head", {*u}});
    if (model->config.tie_word_embeddings)  // the head's matrix is the embedding
      if (const auto e = unit_index("embedding")) passes_.back().units.push_back(*e);
  }
  model_ = model;
  inner_layer_runner_ = model->layer_runner;
  inner_part_runner_ = model->part_runner;
  model->layer_runner = [this](int64_t index, DecoderLayer& layer, const torch::Tensor& x, RopeTables rope) {
    return run_pass(layer_pass_.at(index), [&] {
      return inner_layer_runner_ ? inner_layer_runner_(index, layer, x, rope) : layer->forward(x, rope);
    });
  };
  model->part_runner = [this](const std::string& part, const std::function<torch::Tensor()>& run) {
    const auto it = part_pass_.find(part);
    TORCH_CHECK(it != part_pass_.end(), "zero-3: this rank holds no parameters of the model's ", part);
    return run_pass(it->second, [&] { return inner_part_runner_ ? inner_part_runner_(part, run) : run(); });
  };
  for (size_t u = 0; u < units_.size(); ++u) release(u);  // from now on: only my shard
}

void ZeroOptimizer::gather(size_t u, bool wait) {
  auto& unit = units_[u];
  if (unit.held == Held::kReleased) {
    refill_storage(bucket_param_[u]);
    record("gather " + unit.name);
    unit.gather = group_.all_gather_async(bucket_param_[u], my_params(u));  // [padded / N] -> [padded]
    unit.held = Held::kGathering;
  }
  if (wait && unit.held == Held::kGathering) {
    unit.gather->wait();
    unit.gather.reset();
    unit.held = Held::kGathered;
  }
}

void ZeroOptimizer::release(size_t u) {
  auto& unit = units_[u];
  if (unit.held == Held::kReleased) return;
  gather(u, /*wait=*/true);  // never free a buffer a gather is still writing
  drop_storage(bucket_param_[u]);
  unit.held = Held::kReleased;
  record("release " + unit.name);
}

torch::Tensor ZeroOptimizer::run_pass(size_t k, const std::function<torch::Tensor()>& compute) {
  const Pass& pass = passes_[k];
  const Pass* next = k + 1 < passes_.size() ? &passes_[k + 1] : nullptr;
  for (size_t u : pass.units) gather(u, /*wait=*/true);
  if (next)
    for (size_t u : next->units) gather(u, /*wait=*/false);  // prefetch: travels while this pass computes
  record("forward " + pass.name);
  torch::Tensor y = compute();
  record("forward end " + pass.name);
  const bool backward_follows = torch::GradMode::is_enabled() && y.requires_grad();
  // Backward reaches this pass when y's gradient is ready: the hook brings the units back first.
  if (backward_follows) y.register_hook([this, k](const at::TensorBase&) { before_backward(k); });
  for (size_t u : pass.units) {
    const bool next_needs = next && std::count(next->units.begin(), next->units.end(), u);
    const bool backward_next = backward_follows && !next;  // the last pass: its backward comes at once
    if (!next_needs && !backward_next) release(u);
  }
  return y;
}

void ZeroOptimizer::before_backward(size_t k) {
  for (size_t u : passes_[k].units) gather(u, /*wait=*/true);
  if (k > 0)
    for (size_t u : passes_[k - 1].units) gather(u, /*wait=*/false);  // prefetch, backward runs last to first
  record("backward " + passes_[k].name);
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

std::map<std::string, torch::Tensor> ZeroOptimizer::full_parameters() {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> out;
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const bool gathered_here = stage_ == 3 && units_[b].held == Held::kReleased;
    if (stage_ == 3) gather(b, /*wait=*/true);
    for (size_t i = layout_.buckets[b].first_param; i < layout_.buckets[b].end_param; ++i)
      out[params_[i].name] = params_[i].param.clone();
    if (gathered_here) release(b);
  }
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

}  // namespace picotron
