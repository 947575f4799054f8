// picotron/model.cpp — the LLaMA forward pass. See model.h for the picture, shapes and slots.
#include "picotron/model.h"
#include "picotron/step_place.h"
#include "picotron/dtype.h"

#include <algorithm>
#include <set>

namespace picotron {

namespace F = torch::nn::functional;


// The record of `name`, with a clear error when the plan lacks it.
static const ShardRecord& record_of(const ShardPlan& plan, const std::string& name) {
  const auto it = plan.find(name);
  TORCH_CHECK(it != plan.end(), "shard plan: no record for ", name,
              " (a plan must hold every parameter of a block it holds)");
  return it->second;
}

// ---- building blocks ------------------------------------------------------------
LinearImpl::LinearImpl(int64_t in, int64_t out, torch::TensorOptions opts) {
  weight = register_parameter("weight", torch::empty({out, in}, opts));  // init_parameters fills it
}
torch::Tensor LinearImpl::forward(const torch::Tensor& x) { return torch::linear(x, weight); }

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, torch::TensorOptions opts) {
  weight = register_parameter("weight", torch::empty({num, dim}, opts));
}
torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }

torch::nn::AnyModule make_linear(const ShardRecord& r, torch::TensorOptions opts) {
  const auto shape = r.local_shape();  // [out, in]
  return torch::nn::AnyModule(Linear(/*in=*/shape.at(1), /*out=*/shape.at(0), opts));
}

void replace_slot(torch::nn::Module& owner, const std::string& name, torch::nn::AnyModule& slot,
                  torch::nn::AnyModule replacement) {
  if (owner.named_children().contains(name)) owner.replace_module(name, replacement.ptr());
  else owner.register_module(name, replacement.ptr());
  slot = std::move(replacement);
}

// ---- RMSNorm ----------------------------------------------------------------------
RMSNormImpl::RMSNormImpl(int64_t dim, double eps_, torch::TensorOptions opts) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}, opts));
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto xf = x.to(accumulate_type(x.scalar_type()));                                 // [..., H]
  auto inv_rms = torch::rsqrt(xf.pow(2).mean(/*dim=*/-1, /*keepdim=*/true) + eps);  // [..., 1]
  return weight * (xf * inv_rms).to(x.scalar_type());                              // [..., H]
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return norm(x, weight, eps); }

// ---- RoPE -------------------------------------------------------------------------
RopeTables rope_tables(int64_t head_dim, double theta, const torch::Tensor& positions, torch::ScalarType dtype,
                       torch::Device device) {
  // Computed in fp64 on the CPU, then rounded once to the compute dtype.
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto i = torch::arange(0, head_dim, 2, opts);                          // [Hd/2]
  auto inv_freq = torch::pow(theta, -i / double(head_dim));              // [Hd/2]
  auto pos = positions.to(torch::kCPU, torch::kFloat64);                 // [S]
  auto freqs = torch::outer(pos, inv_freq);                              // [S, Hd/2]
  auto angles = torch::cat({freqs, freqs}, /*dim=*/-1);                  // [S, Hd]
  return {angles.cos().to(device, dtype), angles.sin().to(device, dtype)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& t) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);     // [B, n, S, Hd/2] each
  auto rotated = torch::cat({-x2, x1}, /*dim=*/-1);                    // [B, n, S, Hd]
  return x * t.cos + rotated * t.sin;                                  // tables broadcast over B, n
}

std::tuple<torch::Tensor, torch::Tensor> rope_qk(const torch::Tensor& q, const torch::Tensor& k, const RopeTables& t) {
  return {apply_rope(q.transpose(1, 2), t).transpose(1, 2),   // [B, S, nH, Hd] (turned as [B, nH, S, Hd])
          apply_rope(k.transpose(1, 2), t).transpose(1, 2)};  // [B, S, nKV, Hd]
}

// ---- attention --------------------------------------------------------------------
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t group = q.size(1) / k.size(1);  // query heads per kv head, nH / nKV
  // Head h reads kv head h / group: repeat each kv head `group` times.
  auto k_full = k.repeat_interleave(group, /*dim=*/1);  // [B, nH, S, Hd]
  auto v_full = v.repeat_interleave(group, /*dim=*/1);  // [B, nH, S, Hd]
  return at::scaled_dot_product_attention(q, k_full, v_full, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true);  // [B, nH, S, Hd]
}

AttentionImpl::AttentionImpl(const LlamaConfig& c, const ShardPlan& plan, const std::string& prefix,
                             torch::TensorOptions opts)
    : head_dim(c.head_dim()) {
  q_proj = make_linear(record_of(plan, prefix + "q_proj.weight"), opts);
  k_proj = make_linear(record_of(plan, prefix + "k_proj.weight"), opts);
  v_proj = make_linear(record_of(plan, prefix + "v_proj.weight"), opts);
  o_proj = make_linear(record_of(plan, prefix + "o_proj.weight"), opts);
  register_module("q_proj", q_proj.ptr());
  register_module("k_proj", k_proj.ptr());
  register_module("v_proj", v_proj.ptr());
  register_module("o_proj", o_proj.ptr());
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x_in, const RopeTables& rope) {
  const torch::Tensor x = enter ? enter(x_in) : x_in;  // [B, S, H]
  const int64_t b = x.size(0), s = x.size(1);
  auto q = q_proj.forward(x);  // [B, S, nH*Hd]  (nH: the heads this rank holds)
  auto k = k_proj.forward(x);  // [B, S, nKV*Hd]
  auto v = v_proj.forward(x);  // [B, S, nKV*Hd]
  const int64_t n_heads = q.size(-1) / head_dim, n_kv = k.size(-1) / head_dim;  // from the tensors
  TORCH_CHECK(rope.cos.size(0) == s, "attention sees ", s, " tokens but the RoPE tables cover ", rope.cos.size(0),
              " positions");
  std::tie(q, k) = rotate(q.view({b, s, n_heads, head_dim}), k.view({b, s, n_kv, head_dim}), rope);
  q = q.transpose(1, 2), k = k.transpose(1, 2);                                 // [B, nH, S, Hd], [B, nKV, S, Hd]
  v = v.view({b, s, n_kv, head_dim}).transpose(1, 2);                          // [B, nKV, S, Hd]
  auto out = core(q, k, v);                                                     // [B, nH, S, Hd]
  out = out.transpose(1, 2).reshape({b, s, n_heads * head_dim});                // [B, S, nH*Hd]
  out = o_proj.forward(out);                                                    // [B, S, H]
  return exit ? exit(out) : out;
}

// ---- SwiGLU MLP -------------------------------------------------------------------
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) { return F::silu(gate) * up; }  // [B, S, I]

MLPImpl::MLPImpl(const ShardPlan& plan, const std::string& prefix, torch::TensorOptions opts) {
  gate_proj = make_linear(record_of(plan, prefix + "gate_proj.weight"), opts);
  up_proj = make_linear(record_of(plan, prefix + "up_proj.weight"), opts);
  down_proj = make_linear(record_of(plan, prefix + "down_proj.weight"), opts);
  register_module("gate_proj", gate_proj.ptr());
  register_module("up_proj", up_proj.ptr());
  register_module("down_proj", down_proj.ptr());
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x_in) {
  const torch::Tensor x = enter ? enter(x_in) : x_in;              // [B, S, H]
  const auto gate = gate_proj.forward(x), up = up_proj.forward(x);  // [B, S, I] each
  auto out = down_proj.forward(activation(gate, up));               // [B, S, I] -> [B, S, H]
  return exit ? exit(out) : out;
}

// ---- decoder layer ----------------------------------------------------------------
DecoderLayerImpl::DecoderLayerImpl(const LlamaConfig& c, const ShardPlan& plan, const std::string& prefix,
                                   torch::TensorOptions opts) {
  const auto norm_size = [&](const std::string& n) { return record_of(plan, prefix + n + ".weight").local_shape()[0]; };
  input_layernorm = register_module("input_layernorm", RMSNorm(norm_size("input_layernorm"), c.rms_norm_eps, opts));
  self_attn = register_module("self_attn", Attention(c, plan, prefix + "self_attn.", opts));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", RMSNorm(norm_size("post_attention_layernorm"), c.rms_norm_eps, opts));
  if (plan.count(prefix + "mlp.gate_proj.weight")) mlp = register_module("mlp", MLP(plan, prefix + "mlp.", opts));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  // Each block runs in its place (picotron/step_place.h): what it communicates, forward or
  // backward, is told as this layer's attention or MLP.
  const auto attention = [&](const torch::Tensor& y) { return self_attn->forward(y, rope); };
  auto h = x + in_place(StepPlace::of_part(Part::kAttention), input_layernorm->forward(x), attention);  // [B, S, H]
  const auto x2 = post_attention_layernorm->forward(h);                                                  // [B, S, H]
  TORCH_CHECK(mlp || !feed_forward.is_empty(),
              "a decoder layer without its MLP: a mixture of experts needs add_experts (expert_parallel/moe.h)");
  if (mlp) return h + in_place(StepPlace::of_part(Part::kMlp), x2, [&](const torch::Tensor& y) { return mlp->forward(y); });
  return h + in_place(StepPlace::of_part(Part::kExperts), x2, [&](const torch::Tensor& y) { return feed_forward.forward(y); });
}

void DecoderStackImpl::add(int64_t global_index, DecoderLayer layer) {
  register_module(std::to_string(global_index), layer);
  items.emplace_back(global_index, layer);
}

// ---- whole model ------------------------------------------------------------------
LlamaModelImpl::LlamaModelImpl(const LlamaConfig& c, const ShardPlan& plan, torch::TensorOptions opts) {
  if (plan.count("model.embed_tokens.weight")) {
    const auto shape = plan.at("model.embed_tokens.weight").local_shape();  // [V(/tp), H]
    embed_tokens = torch::nn::AnyModule(Embedding(shape[0], shape[1], opts));
    register_module("embed_tokens", embed_tokens.ptr());
  }
  layers = register_module("layers", DecoderStack());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    if (plan.count(prefix + "input_layernorm.weight")) layers->add(i, DecoderLayer(c, plan, prefix, opts));
  }
  if (plan.count("model.norm.weight"))
    norm = register_module("norm", RMSNorm(plan.at("model.norm.weight").local_shape()[0], c.rms_norm_eps, opts));
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& c, const ShardPlan& plan, torch::TensorOptions opts)
    : config(c) {
  model = register_module("model", LlamaModel(c, plan, opts));
  if (!c.tie_word_embeddings && plan.count("lm_head.weight")) {
    lm_head = make_linear(plan.at("lm_head.weight"), opts);  // [V(/tp), H]
    register_module("lm_head", lm_head.ptr());
  }
  check_holds(plan, /*feed_forward_to_come=*/true);
}

void LlamaForCausalLMImpl::check_holds(const ShardPlan& plan, bool feed_forward_to_come) {
  std::set<std::string> waiting;  // "model.layers.3.": a layer whose block in place of the MLP comes later
  if (feed_forward_to_come)
    for (const auto& [index, layer] : model->layers->items)
      if (!layer->mlp && layer->feed_forward.is_empty()) waiting.insert("model.layers." + std::to_string(index) + ".");
  const auto params = named_parameters();
  for (const auto& [name, record] : plan) {
    const auto dot = name.find('.', std::string("model.layers.").size());
    const bool waits = name.rfind("model.layers.", 0) == 0 && dot != std::string::npos &&
                       waiting.count(name.substr(0, dot + 1));
    TORCH_CHECK(params.contains(name) || waits, "shard plan lists ", name, ", which this model (", config.num_hidden_layers,
                " layers, tied=", config.tie_word_embeddings, ") does not have");
  }
}

// The embedding or the head ("embed" / "head") on x: in its place (picotron/step_place.h),
// through the part runner (ZeRO-3 gathers around it).
static torch::Tensor run_part(const PartRunner& runner, const char* name, Part where, const torch::Tensor& x,
                              const std::function<torch::Tensor(const torch::Tensor&)>& part) {
  return in_place(StepPlace::of_part(where), x, [&](const torch::Tensor& y) {
    const auto run = [&] { return part(y); };
    return runner ? runner(name, run) : run();
  });
}

torch::Tensor LlamaForCausalLMImpl::embed(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be [B, S], got ", tokens.sizes());
  TORCH_CHECK(!model->embed_tokens.is_empty(), "this rank holds no embedding");
  return run_part(part_runner, "embed", Part::kEmbedding, tokens,
                  [&](const torch::Tensor& t) { return model->embed_tokens.forward(t); });  // [B, S, H]
}

torch::Tensor LlamaForCausalLMImpl::run_layers(torch::Tensor x, const torch::Tensor& positions, int64_t first,
                                               int64_t count) {
  const auto& rope = rope_for(positions, x.size(1), x.scalar_type(), x.device());
  for (auto& [index, layer] : model->layers->items)
    if (index >= first && index - first < count)
      x = run_layer(index, layer, x, rope);  // [B, S, H]
  return x;
}

torch::Tensor LlamaForCausalLMImpl::run_layer(int64_t index, DecoderLayer layer, const torch::Tensor& x,
                                              const RopeTables& rope, size_t depth) {
  if (depth == 0)  // everything of this layer, its wrappers' communication too, in its place
    return in_place(StepPlace::of_layer(index), x, [&](const torch::Tensor& y) { return run_layer(index, layer, y, rope, 1); });
  if (depth > layer_wrappers.size()) return layer->forward(x, rope);  // the layer itself
  const LayerCall call{index, layer, [this, index, layer, rope, depth](const torch::Tensor& y) {
                         return run_layer(index, layer, y, rope, depth + 1);  // the wrappers inside
                       }};
  return layer_wrappers[depth - 1].wrap(call, x);
}

void LlamaForCausalLMImpl::unwrap_layers(const std::string& name) {
  layer_wrappers.erase(std::remove_if(layer_wrappers.begin(), layer_wrappers.end(),
                                      [&](const LayerWrapper& w) { return w.name == name; }),
                       layer_wrappers.end());
}

torch::Tensor LlamaForCausalLMImpl::final_norm(const torch::Tensor& x) {
  TORCH_CHECK(model->norm, "this rank holds no final norm");
  return model->norm->forward(x);  // [B, S, H]
}

torch::Tensor LlamaForCausalLMImpl::head_weight() {
  if (!lm_head.is_empty()) return lm_head.ptr()->named_parameters(/*recurse=*/false)["weight"];
  TORCH_CHECK(config.tie_word_embeddings && !model->embed_tokens.is_empty(), "this rank holds no lm_head");
  return model->embed_tokens.ptr()->named_parameters(/*recurse=*/false)["weight"];  // tied: [V, H]
}

torch::Tensor LlamaForCausalLMImpl::logits(const torch::Tensor& hidden) {
  if (head) return head(hidden);
  return torch::linear(hidden, head_weight());  // [B, S, H] x [V, H]^T -> [B, S, V]
}

torch::Tensor LlamaForCausalLMImpl::loss_from_hidden(const torch::Tensor& hidden, const torch::Tensor& targets) {
  if (loss_fn) return loss_fn(hidden, targets);
  auto z = logits(hidden);                                 // [B, S, V]
  z = z.to(accumulate_type(z.scalar_type()));              // fp32 softmax for bf16/fp16
  return F::cross_entropy(z.view({-1, z.size(-1)}), targets.reshape({-1}));  // scalar, mean over B*S
}

// The positions of the tokens given (0..S-1 unless told): RoPE's, whatever shape the
// hidden states take in between (sequence parallelism keeps S/tp of them per rank).
static torch::Tensor positions_of(const torch::Tensor& tokens, const torch::Tensor& positions) {
  return positions.defined() ? positions : torch::arange(tokens.size(1), torch::kInt64);  // [S]
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& tokens, const torch::Tensor& positions) {
  const auto hidden = run_layers(embed(tokens), positions_of(tokens, positions));  // [B, S, H]
  return run_part(part_runner, "head", Part::kHead, hidden,
                  [&](const torch::Tensor& h) { return logits(final_norm(h)); });  // [B, S, V]
}

torch::Tensor LlamaForCausalLMImpl::head_loss(const torch::Tensor& hidden, const torch::Tensor& targets) {
  auto loss = run_part(part_runner, "head", Part::kHead, hidden,
                       [&](const torch::Tensor& h) { return loss_from_hidden(final_norm(h), targets); });  // scalar
  if (layer_stats) {  // (a mixture of experts, training: + c x the balancing loss)
    const auto term = torch::GradMode::is_enabled() ? layer_stats->loss_term() : torch::Tensor();
    if (term.defined()) loss = loss + term.to(loss.scalar_type());
    layer_stats->start();
  }
  return loss;
}

torch::Tensor LlamaForCausalLMImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets,
                                         const torch::Tensor& positions) {
  if (layer_stats) layer_stats->start();  // this forward's statistics only
  return head_loss(run_layers(embed(tokens), positions_of(tokens, positions)), targets);  // [B, S, H] -> scalar
}

const RopeTables& LlamaForCausalLMImpl::rope_for(const torch::Tensor& positions, int64_t seq_len,
                                                 torch::ScalarType dtype, torch::Device device) {
  // [S] int64 on the CPU; no positions means 0..S-1. Comparing S integers is cheap.
  const torch::Tensor pos = positions.defined() ? positions.to(torch::kCPU, torch::kInt64)
                                                : torch::arange(seq_len, torch::kInt64);
  TORCH_CHECK(pos.dim() == 1, "positions must be [S], got ", pos.sizes());
  const bool same_positions = rope_positions_.defined() && rope_positions_.size(0) == pos.size(0) &&
                              torch::equal(pos, rope_positions_);
  if (!same_positions || rope_cache_.cos.scalar_type() != dtype || rope_cache_.cos.device() != device) {
    rope_positions_ = pos.clone();
    rope_cache_ = rope_tables(config.head_dim(), config.rope_theta, rope_positions_, dtype, device);
  }
  return rope_cache_;
}

}  // namespace picotron
