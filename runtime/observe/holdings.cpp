// runtime/observe/holdings.cpp — what each rank holds, read off its shard plan. See holdings.h.
#include "runtime/observe/holdings.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "context_parallel/cp_layout.h"
#include "runtime/cli/train_config.h"

namespace picotron {

std::string ranges_text(const std::vector<int64_t>& v) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;  // a run of consecutive values
    o << (i ? ", " : "") << v[i];
    if (j > i) o << "-" << v[j];
    i = j + 1;
  }
  return o.str();
}

namespace {

const std::string kEmbedding = "model.embed_tokens.weight";

// [first, last] of a parameter's rows this rank holds, in units of `unit` rows (heads: Hd).
std::string rows_of(const ShardPlan& plan, const std::string& name, int64_t unit) {
  const auto it = plan.find(name);
  if (it == plan.end()) return "";
  const Slice s = it->second.slice();  // along split_dim; the whole tensor when not split
  const int64_t first = s.offset / unit, last = (s.offset + s.length) / unit - 1;
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

// The pipeline's part: "embedding, layers 0-1", "layers 2-3, final norm, head".
std::string layers_of(const ShardPlan& plan, const MeshCoords& here) {
  std::set<int64_t> layers;
  const std::string prefix = "model.layers.";
  for (const auto& [name, record] : plan)
    if (name.rfind(prefix, 0) == 0) layers.insert(std::stoll(name.substr(prefix.size())));
  std::vector<std::string> parts;
  const auto e = plan.find(kEmbedding);
  if (e != plan.end() && e->second.stage == here.pp) parts.push_back("embedding");
  if (!layers.empty()) parts.push_back("layers " + ranges_text({layers.begin(), layers.end()}));
  if (plan.count("model.norm.weight")) parts.push_back("final norm");
  if (plan.count("lm_head.weight")) parts.push_back("lm_head");
  else if (e != plan.end() && e->second.stage != here.pp) parts.push_back("head (a copy of the embedding)");
  else if (e != plan.end() && plan.count("model.norm.weight")) parts.push_back("head (the embedding, tied)");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// tp's part: heads, kv heads, MLP columns, vocabulary rows (of the first layer held).
std::string tensor_part_of(const ShardPlan& plan, const LlamaConfig& m) {
  std::string layer;
  for (const auto& [name, record] : plan)
    if (name.rfind("model.layers.", 0) == 0) {
      layer = name.substr(0, name.find('.', std::string("model.layers.").size()));
      break;
    }
  std::ostringstream o;
  const bool moe = !layer.empty() && plan.count(layer + ".block_sparse_moe.gate.weight");
  std::string mlp = "mlp columns " + rows_of(plan, layer + ".mlp.gate_proj.weight", 1) + " of " + std::to_string(m.intermediate_size);
  if (moe) {  // the experts this rank holds
    std::vector<int64_t> held;
    for (int64_t e = 0; e < m.num_local_experts; ++e)
      if (plan.count(layer + ".block_sparse_moe.experts." + std::to_string(e) + ".w1.weight")) held.push_back(e);
    mlp = "experts " + ranges_text(held) + " of " + std::to_string(m.num_local_experts);
  }
  if (!layer.empty())
    o << "heads " << rows_of(plan, layer + ".self_attn.q_proj.weight", m.head_dim()) << " of " << m.num_attention_heads
      << ", kv heads " << rows_of(plan, layer + ".self_attn.k_proj.weight", m.head_dim()) << " of "
      << m.num_key_value_heads << ", " << mlp;
  const std::string vocab = plan.count("lm_head.weight") ? "lm_head.weight" : kEmbedding;
  if (plan.count(vocab))
    o << (layer.empty() ? "" : ", ") << "vocab rows " << rows_of(plan, vocab, 1) << " of " << m.vocab_size;
  return o.str();
}

std::string tokens_of(const TrainConfig& c, int cp_rank) {
  const CpLayout layout = parse_cp_layout(c.cp_layout);
  std::vector<int64_t> pos = cp_positions(c.seq_len, c.cp, cp_rank, layout);
  std::sort(pos.begin(), pos.end());
  return "tokens " + ranges_text(pos) + " of " + std::to_string(c.seq_len) +
         (c.cp > 1 ? std::string(" (") + cp_layout_name(layout) + ")" : "");
}

}  // namespace

std::string holdings_summary(const TrainConfig& c, const MeshShape& shape,
                             const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of) {
  std::ostringstream o;
  o << "what each rank holds (sequence positions of one micro-batch; each dp rank its own "
    << c.micro_batch_size << " sequence(s) of every micro-batch";
  if (c.sp) o << "; sp: between blocks each tp rank keeps 1/" << shape.tp << " of its positions";
  if (c.zero >= 3)
    o << "; zero-3: of these parameters, a 1/" << (c.zero_shard > 0 ? c.zero_shard : shape.dp) * shape.cp
      << " slice between uses" << (c.zero_shard > 0 ? " (HSDP: the same slice in each shard group)" : "");
  o << "):";
  if (shape.world_size() < 8) {  // a line per rank
    for (int r = 0; r < shape.world_size(); ++r) {
      const MeshCoords here = coords_of(shape, r);
      const ShardPlan plan = shard_plan_of(here);
      o << "\n  rank " << r << " (dp " << here.dp << " pp " << here.pp << " cp " << here.cp << " tp " << here.tp
        << "): " << layers_of(plan, here) << " | " << tensor_part_of(plan, c.llama) << " | " << tokens_of(c, here.cp);
    }
    return o.str();
  }
  // 8 ranks and more: a line per coordinate of each axis; a rank holds the intersection.
  for (int p = 0; p < shape.pp; ++p) {
    const MeshCoords here{0, p, 0, 0};
    o << "\n  pp " << p << ": " << layers_of(shard_plan_of(here), here);
  }
  for (int t = 0; t < shape.tp; ++t) o << "\n  tp " << t << ": " << tensor_part_of(shard_plan_of({0, 0, 0, t}), c.llama);
  for (int k = 0; k < shape.cp; ++k) o << "\n  cp " << k << ": " << tokens_of(c, k);
  return o.str();
}

}  // namespace picotron
