// picotron/shard.cpp — shard records and plans: pure arithmetic. See shard.h.
#include "picotron/shard.h"

#include <algorithm>
#include <stdexcept>

namespace picotron {

Slice even_slice(int64_t full, int index, int count) {
  if (count < 1 || index < 0 || index >= count)
    throw std::invalid_argument("even_slice: index " + std::to_string(index) + " of " + std::to_string(count));
  const int64_t base = full / count, extra = full % count;  // the first `extra` slices get one more
  return {index * base + std::min<int64_t>(index, extra), base + (index < extra ? 1 : 0)};
}

Slice ShardRecord::slice() const {
  if (!is_split()) return {0, full_shape.empty() ? 1 : full_shape[0]};
  return even_slice(full_shape.at(split_dim), index, count);
}

std::vector<int64_t> ShardRecord::local_shape() const {
  std::vector<int64_t> shape = full_shape;
  if (is_split()) shape.at(split_dim) = slice().length;
  return shape;
}

static int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ShardRecord::local_numel() const { return product(local_shape()); }
int64_t ShardRecord::full_numel() const { return product(full_shape); }

bool ShardRecord::counts_once(const MeshCoords& here) const {
  if (here.pp != stage) return false;  // a copy held for another stage (a tied lm_head)
  for (Axis a : replica_axes)
    if (coordinate(here, a) / (a == Axis::kDp ? dp_stride : 1) != 0) return false;  // another replica counts
  return true;
}

void ShardRecord::split(int dim, Axis axis, int new_index, int new_count) {
  if (new_count < 1 || new_index < 0 || new_index >= new_count)
    throw std::invalid_argument(name + ": slice " + std::to_string(new_index) + " of " + std::to_string(new_count) +
                                " over --" + axis_name(axis) + " does not exist");
  if (dim < 0 || dim >= int(full_shape.size()))
    throw std::invalid_argument(name + ": cannot split dim " + std::to_string(dim) + " of a " +
                                std::to_string(full_shape.size()) + "-d parameter");
  if (full_shape[dim] < new_count)
    throw std::invalid_argument(name + ": dim " + std::to_string(dim) + " has " + std::to_string(full_shape[dim]) +
                                " entries, fewer than the " + std::to_string(new_count) + " --" + axis_name(axis) +
                                " ranks it is split over");
  split_dim = dim;
  split_axis = axis;
  index = new_index;
  count = new_count;
  replica_axes.erase(std::remove(replica_axes.begin(), replica_axes.end(), axis), replica_axes.end());
}

std::vector<std::pair<std::string, std::vector<int64_t>>> parameter_shapes(const LlamaConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim(), kv = c.num_key_value_heads * c.head_dim();
  const int64_t i = c.intermediate_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});  // [V, H]
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}});   // [nH*Hd, H]   (Linear: [out, in])
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}});  // [nKV*Hd, H]
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}});  // [nKV*Hd, H]
    out.push_back({p + "self_attn.o_proj.weight", {h, q}});   // [H, nH*Hd]
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    if (c.is_moe()) {  // Mixtral's names: the router, then each expert's w1 (gate), w2 (down), w3 (up)
      const std::string m = p + "block_sparse_moe.";
      out.push_back({m + "gate.weight", {c.num_local_experts, h}});  // [E, H]
      for (int64_t e = 0; e < c.num_local_experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        out.push_back({x + "w1.weight", {i, h}});  // [I, H]
        out.push_back({x + "w2.weight", {h, i}});  // [H, I]
        out.push_back({x + "w3.weight", {i, h}});  // [I, H]
      }
      continue;
    }
    out.push_back({p + "mlp.gate_proj.weight", {i, h}});      // [I, H]
    out.push_back({p + "mlp.up_proj.weight", {i, h}});        // [I, H]
    out.push_back({p + "mlp.down_proj.weight", {h, i}});      // [H, I]
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});  // [V, H]
  return out;
}

ShardPlan replicated_plan(const LlamaConfig& c) {
  ShardPlan plan;
  for (auto& [name, shape] : parameter_shapes(c)) {
    ShardRecord r;
    r.name = name;
    r.full_shape = shape;
    r.replica_axes = {Axis::kDp, Axis::kCp, Axis::kTp};
    plan[name] = r;
  }
  return plan;
}

int64_t local_parameter_count(const ShardPlan& plan) {
  int64_t n = 0;
  for (const auto& [name, r] : plan) n += r.local_numel();
  return n;
}

bool is_pipeline_end(const ShardPlan& plan, const MeshCoords& here) {
  const auto e = plan.find("model.embed_tokens.weight");
  return e != plan.end() && (!plan.count("model.norm.weight") || e->second.stage != here.pp);
}

}  // namespace picotron
