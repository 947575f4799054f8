// picotron/model.cpp — the LLaMA forward pass. See model.h for the picture and shapes.
#include "picotron/model.h"

namespace picotron {

namespace F = torch::nn::functional;

// Norm statistics in at least fp32: bf16 has 8 bits of mantissa, too few to average
// thousands of squares.
static torch::ScalarType accumulate_type(torch::ScalarType t) {
  return t == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// ---- RMSNorm ----------------------------------------------------------------------
RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto xf = x.to(accumulate_type(x.scalar_type()));                         // [..., H]
  auto inv_rms = torch::rsqrt(xf.pow(2).mean(/*dim=*/-1, /*keepdim=*/true) + eps);  // [..., 1]
  return weight * (xf * inv_rms).to(x.scalar_type());                      // [..., H]
}

// ---- RoPE -------------------------------------------------------------------------
RopeTables rope_tables(int64_t head_dim, double theta, int64_t seq_len, int64_t offset,
                       torch::ScalarType dtype, torch::Device device) {
  // Computed in fp64 on the CPU, then rounded once to the compute dtype.
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto i = torch::arange(0, head_dim, 2, opts);                        // [Hd/2]
  auto inv_freq = torch::pow(theta, -i / double(head_dim));            // [Hd/2]
  auto pos = torch::arange(offset, offset + seq_len, opts);            // [S]
  auto freqs = torch::outer(pos, inv_freq);                            // [S, Hd/2]
  auto angles = torch::cat({freqs, freqs}, /*dim=*/-1);                // [S, Hd]
  return {angles.cos().to(device, dtype), angles.sin().to(device, dtype)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& t) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);     // [B, n, S, Hd/2] each
  auto rotated = torch::cat({-x2, x1}, /*dim=*/-1);                    // [B, n, S, Hd]
  return x * t.cos + rotated * t.sin;                                  // tables broadcast over B, n
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

torch::nn::AnyModule make_linear(int64_t in, int64_t out) {
  return torch::nn::AnyModule(torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
}

AttentionImpl::AttentionImpl(const LlamaConfig& c)
    : num_heads(c.num_attention_heads), num_kv_heads(c.num_key_value_heads), head_dim(c.head_dim()) {
  const int64_t h = c.hidden_size;
  q_proj = make_linear(h, num_heads * head_dim);
  k_proj = make_linear(h, num_kv_heads * head_dim);
  v_proj = make_linear(h, num_kv_heads * head_dim);
  o_proj = make_linear(num_heads * head_dim, h);
  register_module("q_proj", q_proj.ptr());
  register_module("k_proj", k_proj.ptr());
  register_module("v_proj", v_proj.ptr());
  register_module("o_proj", o_proj.ptr());
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  const int64_t b = x.size(0), s = x.size(1);
  auto q = q_proj.forward(x).view({b, s, num_heads, head_dim}).transpose(1, 2);     // [B, nH, S, Hd]
  auto k = k_proj.forward(x).view({b, s, num_kv_heads, head_dim}).transpose(1, 2);  // [B, nKV, S, Hd]
  auto v = v_proj.forward(x).view({b, s, num_kv_heads, head_dim}).transpose(1, 2);  // [B, nKV, S, Hd]
  q = apply_rope(q, rope);
  k = apply_rope(k, rope);
  auto out = core(q, k, v);                                                          // [B, nH, S, Hd]
  out = out.transpose(1, 2).reshape({b, s, num_heads * head_dim});                   // [B, S, nH*Hd]
  return o_proj.forward(out);                                                        // [B, S, H]
}

// ---- SwiGLU MLP -------------------------------------------------------------------
MLPImpl::MLPImpl(const LlamaConfig& c) {
  gate_proj = make_linear(c.hidden_size, c.intermediate_size);
  up_proj = make_linear(c.hidden_size, c.intermediate_size);
  down_proj = make_linear(c.intermediate_size, c.hidden_size);
  register_module("gate_proj", gate_proj.ptr());
  register_module("up_proj", up_proj.ptr());
  register_module("down_proj", down_proj.ptr());
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  auto gated = F::silu(gate_proj.forward(x)) * up_proj.forward(x);  // [B, S, I]
  return down_proj.forward(gated);                                  // [B, S, H]
}

// ---- decoder layer ----------------------------------------------------------------
DecoderLayerImpl::DecoderLayerImpl(const LlamaConfig& c) {
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  self_attn = register_module("self_attn", Attention(c));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  mlp = register_module("mlp", MLP(c));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  auto h = x + self_attn->forward(input_layernorm->forward(x), rope);  // [B, S, H]
  return h + mlp->forward(post_attention_layernorm->forward(h));      // [B, S, H]
}

// ---- whole model ------------------------------------------------------------------
LlamaModelImpl::LlamaModelImpl(const LlamaConfig& c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& c) : config(c) {
  model = register_module("model", LlamaModel(c));
  if (!c.tie_word_embeddings)
    lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.hidden_size, c.vocab_size).bias(false)));
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& tokens, int64_t position_offset) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be [B, S], got ", tokens.sizes());
  auto x = model->embed_tokens->forward(tokens);  // [B, S, H]
  const auto& rope = rope_for(tokens.size(1), position_offset, x.scalar_type(), x.device());
  for (const auto& layer : *model->layers) x = layer->as<DecoderLayer>()->forward(x, rope);  // [B, S, H]
  x = model->norm->forward(x);                                                               // [B, S, H]
  if (lm_head) return lm_head->forward(x);                                                   // [B, S, V]
  return torch::matmul(x, model->embed_tokens->weight.t());                                  // [B, S, V]
}

const RopeTables& LlamaForCausalLMImpl::rope_for(int64_t seq_len, int64_t offset, torch::ScalarType dtype,
                                                 torch::Device device) {
  if (seq_len != rope_len_ || offset != rope_offset_ || !rope_cache_.cos.defined() ||
      rope_cache_.cos.scalar_type() != dtype || rope_cache_.cos.device() != device) {
    rope_cache_ = rope_tables(config.head_dim(), config.rope_theta, seq_len, offset, dtype, device);
    rope_len_ = seq_len;
    rope_offset_ = offset;
  }
  return rope_cache_;
}

torch::Tensor LlamaForCausalLMImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  auto logits = forward(tokens);                                          // [B, S, V]
  logits = logits.to(accumulate_type(logits.scalar_type()));            // fp32 softmax for bf16/fp16
  return F::cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));  // scalar, mean over B*S
}

}  // namespace picotron
