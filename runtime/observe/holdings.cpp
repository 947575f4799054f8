// runtime/observe/holdings.cpp — what each rank holds, read off its shard plan. See holdings.h.
#include "runtime/observe/holdings.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "context_parallel/cp_layout.h"
#include "runtime/cli/train_config.h"
#include "zero/zero_groups.h"

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

std::string span_text(int64_t first, int64_t count) {
  return count == 1 ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(first + count - 1);
}

RankHoldings holdings_of(const TrainConfig& c, const MeshCoords& here, const ShardPlan& plan) {
  const LlamaConfig& m = c.llama;
  RankHoldings h;
  std::set<int64_t> layers;
  const std::string prefix = "model.layers.";
  for (const auto& [name, record] : plan)
    if (name.rfind(prefix, 0) == 0) layers.insert(std::stoll(name.substr(prefix.size())));
  h.layers = {layers.begin(), layers.end()};
  const auto e = plan.find("model.embed_tokens.weight");
  h.embedding = e != plan.end() && e->second.stage == here.pp;
  h.tied_copy = e != plan.end() && e->second.stage != here.pp;
  h.final_norm = plan.count("model.norm.weight") > 0;
  h.lm_head = plan.count("lm_head.weight") > 0;
  // A parameter's rows here, in units of `unit` rows (heads: Hd), along its split.
  const auto span = [&](const std::string& name, int64_t unit) {
    const Slice s = plan.at(name).slice();  // the whole tensor when not split
    return RankHoldings::Span{s.offset / unit, s.length / unit};
  };
  if (!h.layers.empty()) {
    const std::string layer = prefix + std::to_string(h.layers.front()) + ".";
    h.q_heads = span(layer + "self_attn.q_proj.weight", m.head_dim());
    h.kv_heads = span(layer + "self_attn.k_proj.weight", m.head_dim());
    h.moe = plan.count(layer + "block_sparse_moe.gate.weight") > 0;
    if (h.moe) {
      for (int64_t x = 0; x < m.num_local_experts; ++x)
        if (plan.count(layer + "block_sparse_moe.experts." + std::to_string(x) + ".w1.weight")) h.experts.push_back(x);
    } else {
      h.mlp_columns = span(layer + "mlp.gate_proj.weight", 1);
    }
  }
  const std::string vocab = h.lm_head ? "lm_head.weight" : "model.embed_tokens.weight";
  h.vocab_held = plan.count(vocab) > 0;
  if (h.vocab_held) h.vocab_rows = span(vocab, 1);
  h.embedding_split = e != plan.end() && e->second.is_split();
  if (h.embedding_split) h.embedding_rows = span(e->first, 1);
  h.positions = cp_positions(c.seq_len, c.cp, here.cp, parse_cp_layout(c.cp_layout));
  std::sort(h.positions.begin(), h.positions.end());
  return h;
}

namespace {

// The start-up table's printer. The pipeline's part: "embedding, layers 0-1", "layers 2-3, final norm, head".
std::string layers_of(const RankHoldings& h) {
  std::vector<std::string> parts;
  if (h.embedding) parts.push_back("embedding");
  if (!h.layers.empty()) parts.push_back("layers " + ranges_text(h.layers));
  if (h.final_norm) parts.push_back("final norm");
  if (h.lm_head) parts.push_back("lm_head");
  else if (h.tied_copy) parts.push_back("head (a copy of the embedding)");
  else if (h.embedding && h.final_norm) parts.push_back("head (the embedding, tied)");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// tp's part: heads, kv heads, MLP columns (or experts), vocabulary rows (of the first layer held).
std::string tensor_part_of(const RankHoldings& h, const LlamaConfig& m) {
  std::ostringstream o;
  const auto text = [](const RankHoldings::Span& s) { return span_text(s.first, s.count); };
  if (!h.layers.empty())
    o << "heads " << text(h.q_heads) << " of " << m.num_attention_heads << ", kv heads " << text(h.kv_heads) << " of "
      << m.num_key_value_heads << ", "
      << (h.moe ? "experts " + ranges_text(h.experts) + " of " + std::to_string(m.num_local_experts)
                : "mlp columns " + text(h.mlp_columns) + " of " + std::to_string(m.intermediate_size));
  if (h.vocab_held)
    o << (h.layers.empty() ? "" : ", ") << "vocab rows " << text(h.vocab_rows) << " of " << m.vocab_size;
  return o.str();
}

std::string tokens_of(const TrainConfig& c, const RankHoldings& h) {
  return "tokens " + ranges_text(h.positions) + " of " + std::to_string(c.seq_len) +
         (c.cp > 1 ? std::string(" (") + cp_layout_name(parse_cp_layout(c.cp_layout)) + ")" : "");
}

}  // namespace

std::string holdings_summary(const TrainConfig& c, const MeshShape& shape,
                             const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of) {
  std::ostringstream o;
  o << "what each rank holds (sequence positions of one micro-batch; each dp rank its own "
    << c.micro_batch_size << " sequence(s) of every micro-batch";
  if (c.sp) o << "; sp: between blocks each tp rank keeps 1/" << shape.tp << " of its positions";
  if (c.zero >= 3)
    o << "; zero-3: of these parameters, a 1/" << zero_block_ranks(c.zero_shard, shape.cp, 1, shape.dp * shape.cp)
      << " slice between uses" << (c.zero_shard > 0 ? " (HSDP: the same slice in each shard group)" : "");
  o << "):";
  if (shape.world_size() < 8) {  // a line per rank
    for (int r = 0; r < shape.world_size(); ++r) {
      const MeshCoords here = coords_of(shape, r);
      const RankHoldings h = holdings_of(c, here, shard_plan_of(here));
      o << "\n  rank " << r << " (dp " << here.dp << " pp " << here.pp << " cp " << here.cp << " tp " << here.tp
        << "): " << layers_of(h) << " | " << tensor_part_of(h, c.llama) << " | " << tokens_of(c, h);
    }
    return o.str();
  }
  // 8 ranks and more: a line per coordinate of each axis; a rank holds the intersection.
  for (int p = 0; p < shape.pp; ++p) {
    const MeshCoords here{0, p, 0, 0};
    o << "\n  pp " << p << ": " << layers_of(holdings_of(c, here, shard_plan_of(here)));
  }
  for (int t = 0; t < shape.tp; ++t) {
    const MeshCoords here{0, 0, 0, t};
    o << "\n  tp " << t << ": " << tensor_part_of(holdings_of(c, here, shard_plan_of(here)), c.llama);
  }
  for (int k = 0; k < shape.cp; ++k) {
    const MeshCoords here{0, 0, k, 0};
    o << "\n  cp " << k << ": " << tokens_of(c, holdings_of(c, here, shard_plan_of(here)));
  }
  return o.str();
}

}  // namespace picotron
