// runtime/planner/memory_parameters.cpp — what a rank's parameters come to under ZeRO's
// layout (held_parameters, parameter_counts: memory_estimate.h). The first walks the shard
// plan's names once; the second lays the sizes out as the optimizers do (zero/zero_layout.h:
// the slices, buckets and units) and reads off what the estimate needs.
#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "picotron/shard.h"
#include "runtime/cli/train_config.h"
#include "runtime/planner/memory_estimate.h"
#include "zero/zero_groups.h"
#include "zero/zero_layout.h"

namespace picotron {

HeldParameters held_parameters(const TrainConfig& c, const MeshCoords& here, const ShardPlan& plan) {
  const LlamaConfig& m = c.llama;
  HeldParameters held;
  held.has_embed = plan.count("model.embed_tokens.weight") > 0, held.has_head = plan.count("model.norm.weight") > 0;
  held.tied_here = m.tie_word_embeddings && held.has_embed && held.has_head;
  held.pipeline_end = is_pipeline_end(plan, here);
  const std::string layers = "model.layers.";
  for (const auto& [name, shape] : parameter_shapes(m)) {  // the model's parameter order
    const auto it = plan.find(name);
    if (it == plan.end()) continue;
    HeldParameter p;
    p.numel = it->second.local_numel();
    p.expert = it->second.dp_stride > 1;
    // zero3_unit(name) as a number: "layer N" -> N, "embedding" -> kEmbedding, "head" -> kHead
    const std::string unit = zero3_unit(name);
    p.unit = unit == "embedding" ? HeldParameter::kEmbedding : unit == "head" ? HeldParameter::kHead
                                                                              : std::stoi(name.substr(layers.size()));
    p.norm_or_head = name == "model.norm.weight" || name == "lm_head.weight";
    p.down_proj = p.unit >= 0 && name == layers + std::to_string(p.unit) + ".mlp.down_proj.weight";
    held.params.push_back(p);
  }
  return held;
}

namespace {

// ZeRO's units and buckets that the estimate's peaks read, from the layout the optimizers
// cut (`laid`: the parameters in it, in order).
void count_units(const TrainConfig& c, const std::vector<const HeldParameter*>& laid, const ZeroLayout& layout,
                 ParameterCounts& n) {
  // ZeRO-3 keeps the last unit of its forward gathered until its backward: the head (and a
  // tied embedding).
  if (c.zero == 3 && n.has_head)
    for (const auto& b : layout.buckets) {
      const int u = laid[b.first_param]->unit;
      if (u == HeldParameter::kHead || (u == HeldParameter::kEmbedding && n.tied_here)) n.head_unit += double(b.padded);
    }
  if (c.zero >= 2 && n.zero_buckets) {
    // The gradient buckets that the head and the newest layer's down projection have
    // reached (the backward's peak below).
    int newest_layer = -1;
    for (const HeldParameter* p : laid) newest_layer = std::max(newest_layer, p->unit);
    for (const auto& b : layout.buckets) {
      bool touched = false;
      for (size_t i = b.first_param; i < b.end_param; ++i)
        touched = touched || laid[i]->norm_or_head || (laid[i]->down_proj && laid[i]->unit == newest_layer);
      if (touched) n.touched_buckets += double(b.padded);
    }
    if (c.zero == 3)
      for (const auto& b : layout.buckets)
        if (laid[b.first_param]->unit >= 0) n.layer_unit = std::max(n.layer_unit, double(b.padded));
  }
}

// hpZ: every unit released after its forward keeps its 1/(h x cp) part until its backward
// ([padded] -> [padded / H], H = h x cp ranks; the experts' group holds 1 in ep of them).
// Not the last pass's units, which go gathered from forward into backward: the head (with
// a pipeline's last-stage copy of a tied embedding, used only there), or a pipeline
// stage's last layer. A tied embedding that also runs the lookup keeps a part too: it is
// released after the lookup and gathered again, from the parts, for the head.
double hpz_parts(const TrainConfig& c, const HeldParameters& held, const std::vector<const HeldParameter*>& laid,
                 const ZeroLayout& layout, const ParameterCounts& n, double experts_padded) {
  const double H = double(c.zero_hpz) * c.cp;
  double last_pass = 0;
  for (const auto& b : layout.buckets) {
    const int u = laid[b.first_param]->unit;
    if (u == HeldParameter::kHead || (u == HeldParameter::kEmbedding && n.tied_here && c.pp > 1)) last_pass += double(b.padded);
  }
  if (!held.has_head) last_pass = n.layer_unit;  // (each layer the same size)
  return (double(layout.numel) - last_pass) / H + experts_padded / (H / c.ep);
}

}  // namespace

ParameterCounts parameter_counts(const TrainConfig& c, const MeshCoords& here, const ShardPlan& plan) {
  return parameter_counts(c, held_parameters(c, here, plan));
}

ParameterCounts parameter_counts(const TrainConfig& c, const HeldParameters& held) {
  const double a = c.dtype == Precision::kFP64 ? 8 : 4;  // accumulation: grads (ZeRO's buckets)
  ParameterCounts n;
  n.has_embed = held.has_embed, n.has_head = held.has_head, n.tied_here = held.tied_here;
  std::vector<int64_t> numels, expert_numels;
  std::vector<const HeldParameter*> laid;  // the parameters in cp x dp's layout, in order
  // ZeRO with --ep slices the experts over their replica group (the cp x dp / ep ranks that
  // hold the same experts; DenseAndExperts in expert_parallel/), the rest over cp x dp.
  const bool experts_apart = c.ep > 1 && c.zero > 0;
  for (const HeldParameter& p : held.params) {
    if (experts_apart && p.expert) {
      expert_numels.push_back(p.numel);
      continue;
    }
    numels.push_back(p.numel);
    laid.push_back(&p);
  }
  std::vector<int> units, embedding_alone;
  for (size_t i = 0; i < laid.size(); ++i) {  // ZeRO-3's units: consecutive parameters of one unit
    units.push_back(i == 0 ? 0 : units.back() + int(laid[i]->unit != laid[i - 1]->unit));
    // stage 2: a pipeline end's embedding in a bucket of its own (embedding_alone_units)
    if (held.pipeline_end) embedding_alone.push_back(laid[i]->unit == HeldParameter::kEmbedding ? 0 : 1);
  }
  const int N = zero_block_ranks(c.zero_shard, c.cp, 1, c.dp * c.cp);  // ZeRO's shard group (HSDP: cp x --zero-shard)
  const int64_t capacity = c.zero == 3 ? INT64_MAX : std::max<int64_t>(1, int64_t(c.dp_bucket_mb * 1024 * 1024 / a));
  // (as the optimizers cut it: stage 3 by unit, stage 2 with a pipeline's embedding alone)
  const ZeroLayout layout = zero_layout(numels, N, capacity, c.zero == 3 ? units
                                        : c.zero == 2 ? embedding_alone
                                                      : std::vector<int>{});
  n.zero_buckets = !laid.empty();
  n.experts_apart = !expert_numels.empty();
  n.P = double(layout.numel), n.shard = double(layout.shard);
  double experts_padded = 0;
  if (n.experts_apart) {  // (stage 3 gathers one expert unit at a time: not modelled)
    const ZeroLayout experts = zero_layout(expert_numels, std::max(1, N / c.ep), capacity, {});
    n.P += double(experts.numel), n.shard += double(experts.shard);
    experts_padded = double(experts.numel);
  }
  count_units(c, laid, layout, n);
  if (c.zero == 3 && c.zero_hpz > 0) n.hpz_parts = hpz_parts(c, held, laid, layout, n, experts_padded);
  return n;
}

}  // namespace picotron
