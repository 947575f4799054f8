// zero/zero3.cpp — ZeRO-3: each unit's parameters gathered just before it computes (the
// next one prefetched), released after, and gathered again for its backward. See zero3.h
// for the picture; the gradients take stage 2's path (zero2.cpp), the update is
// zero_shard.cpp's.
#include "zero/zero3.h"

#include <algorithm>
#include <stdexcept>

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

void Zero3Optimizer::gather(size_t u, bool wait) {
  if (units_[u].held == Held::kReleased && units_[u].secondary.defined()) gather_secondary(u);  // hpZ's backward
  // BEGIN ASSIGNMENT zero.stage3_gather_release
  auto& unit = units_[u];
  if (unit.held == Held::kReleased) {
    refill_storage(shard_.bucket[u]);
    shard_.record("gather " + unit.name);
    unit.gather = shard_.group.all_gather_async(shard_.bucket[u], shard_.my_params(u), carries("ZeRO-3: a unit's parameters from "
                                          "every shard (the one about to run, or the next, prefetched)"));  // [padded / N] -> [padded]
    unit.held = Held::kGathering;
  }
  if (wait && unit.held == Held::kGathering) {
    unit.gather->wait();
    unit.gather.reset();
    unit.held = Held::kGathered;
  }
  // END ASSIGNMENT
}

// hpZ (zero_groups.h): the backward's gather is over the H ranks of my secondary group,
// each giving its 1/H part kept since the forward, instead of over the S of my shard group.
void Zero3Optimizer::gather_secondary(size_t u) {
  auto& unit = units_[u];
  Comm& secondary = shard_.groups.secondary();
  refill_storage(shard_.bucket[u]);
  shard_.record("gather " + unit.name + " (hpZ)");
  unit.gather = secondary.all_gather_async(shard_.bucket[u], unit.secondary, carries("hpZ: a unit's parameters from the "
                                           "parts kept since its forward (for its backward, or the tied head's lookup)"));  // [padded / H] -> [padded]
  unit.held = Held::kGathering;
}

void Zero3Optimizer::release(size_t u, bool keep_secondary) {
  if (!keep_secondary) units_[u].secondary = torch::Tensor();  // hpZ's part goes with the unit's backward
  else if (!units_[u].secondary.defined() && units_[u].held != Held::kReleased) {
    gather(u, /*wait=*/true);
    const int64_t part = shard_.bucket[u].numel() / shard_.groups.secondary().size();  // [padded / H]
    units_[u].secondary = shard_.bucket[u].narrow(0, shard_.groups.secondary().rank() * part, part).clone();
  }
  // BEGIN ASSIGNMENT zero.stage3_gather_release
  auto& unit = units_[u];
  if (unit.held == Held::kReleased) return;
  gather(u, /*wait=*/true);  // never free a buffer a gather is still writing
  drop_storage(shard_.bucket[u]);
  unit.held = Held::kReleased;
  shard_.record("release " + unit.name);
  // END ASSIGNMENT
}

torch::Tensor Zero3Optimizer::run_pass(size_t k, const std::function<torch::Tensor()>& compute) {
  const Pass& pass = passes_[k];
  const Pass* next = k + 1 < passes_.size() ? &passes_[k + 1] : nullptr;
  for (size_t u : pass.units) gather(u, /*wait=*/true);
  if (next)
    for (size_t u : next->units) gather(u, /*wait=*/false);  // prefetch: travels while this pass computes
  shard_.record("forward " + pass.name);
  torch::Tensor y = compute();
  shard_.record("forward end " + pass.name);
  const bool backward_follows = torch::GradMode::is_enabled() && y.requires_grad();
  // Backward reaches this pass when y's gradient is ready: the hook brings the units back first.
  if (backward_follows) y.register_hook([this, k](const at::TensorBase&) { before_backward(k); });
  for (size_t u : pass.units) {
    const bool next_needs = next && std::count(next->units.begin(), next->units.end(), u);
    const bool backward_next = backward_follows && !next;  // the last pass: its backward comes at once
    if (!next_needs && !backward_next) release(u, /*keep_secondary=*/backward_follows && shard_.groups.has_secondary());
  }
  return y;
}

void Zero3Optimizer::before_backward(size_t k) {
  for (size_t u : passes_[k].units) gather(u, /*wait=*/true);
  if (k > 0)
    for (size_t u : passes_[k - 1].units) gather(u, /*wait=*/false);  // prefetch, backward runs last to first
  shard_.record("backward " + passes_[k].name);
}

// ---- the units and the passes, and the runners that put them around the model ------------

namespace {
// One id per parameter: its unit ("embedding", "layer 3", "head"), consecutive.
std::vector<int> unit_ids(const std::vector<std::pair<std::string, torch::Tensor>>& named_params) {
  std::vector<std::string> names;
  std::vector<int> ids;
  for (const auto& [name, p] : named_params) {
    const std::string unit = zero3_unit(name);
    if (names.empty() || names.back() != unit) {
      TORCH_CHECK(std::find(names.begin(), names.end(), unit) == names.end(), "zero-3: the parameters of ", unit,
                  " are not consecutive (", name, ")");
      names.push_back(unit);
    }
    ids.push_back(int(names.size()) - 1);
  }
  return ids;
}
}  // namespace

Zero3Optimizer::Zero3Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                               AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, bool offload,
                               LlamaForCausalLM& model)
    : shard_(std::move(groups), named_params, opts, plan, here,
             {/*bucket_capacity: one bucket per unit*/ INT64_MAX, unit_ids(named_params), /*whole_parameters=*/false,
              offload}) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : named_params)
    if (units_.empty() || units_.back().name != zero3_unit(name)) units_.push_back(Unit{zero3_unit(name), Held::kGathered, std::nullopt, {}});
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
  inner_part_runner_ = model->part_runner;
  wrapper_ = "zero-3 " + shard_.groups.whole_name();  // one per optimizer: DenseAndExperts runs two (cp_dp, ep_replicas)
  model->wrap_layers({wrapper_, [this](const LayerCall& call, const torch::Tensor& x) {
                        return run_pass(layer_pass_.at(call.index), [&] { return call.next(x); });
                      }});
  model->part_runner = [this](const std::string& part, const std::function<torch::Tensor()>& run) {
    const auto inner = [&] { return inner_part_runner_ ? inner_part_runner_(part, run) : run(); };
    const auto it = part_pass_.find(part);
    if (it == part_pass_.end()) return inner();  // none of its parameters here (the experts' ZeRO-3)
    return run_pass(it->second, inner);
  };
  for (size_t u = 0; u < units_.size(); ++u) release(u);  // from now on: only my shard
}

Zero3Optimizer::~Zero3Optimizer() {  // the runners we installed point at us
  model_->unwrap_layers(wrapper_);
  model_->part_runner = inner_part_runner_;
}

void Zero3Optimizer::accumulate_grads() {
  grads_.finish_micro_batch();
  for (size_t u = 0; u < units_.size(); ++u) release(u);  // a unit no gradient reached
}

void Zero3Optimizer::sync_grads() {
  shard_.average_over_replicas();  // HSDP: my slice holds the micro-batches' averages over my shard group
  if (has_grad_sums()) grads_.with_my_pieces([this](std::vector<TrainableParam>& held) { run_grad_sums(held); });
}

std::map<std::string, torch::Tensor> Zero3Optimizer::gathered_weights() {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> out;
  for (size_t b = 0; b < shard_.layout.buckets.size(); ++b) {
    const bool gathered_here = units_[b].held == Held::kReleased;
    gather(b, /*wait=*/true);
    for (size_t i = shard_.layout.buckets[b].first_param; i < shard_.layout.buckets[b].end_param; ++i)
      out[shard_.params[i].name] = shard_.params[i].param.clone();
    if (gathered_here) release(b);
  }
  return out;
}

}  // namespace picotron
