// zero/zero3.cpp — ZeRO-3's part of ZeroOptimizer: each unit's parameters gathered just
// before it computes (the next one prefetched), released after, and gathered again for
// its backward. See zero.h for the picture; the gradients take stage 2's path (zero.cpp).
#include "zero/zero.h"

#include <algorithm>

namespace picotron {

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

}  // namespace picotron
