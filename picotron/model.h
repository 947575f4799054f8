// picotron/model.h — LLaMA: embedding, RMSNorm, RoPE, grouped-query attention,
// SwiGLU MLP, final norm, lm_head (tied or not).
//
// Parameter names are Hugging Face's ("model.layers.3.self_attn.q_proj.weight",
// "lm_head.weight"), so initialisation (keyed by name), checkpoints and weight import
// all speak the same language.
//
//   tokens [B, S]
//     -> embed_tokens                                  [B, S, H]
//     -> L x DecoderLayer:                             [B, S, H]
//          x = x + o_proj(attn(rope(q), rope(k), v))    (input_layernorm first)
//          x = x + down_proj(silu(gate_proj(x)) * up_proj(x))   (post_attention_layernorm first)
//     -> norm                                          [B, S, H]
//     -> lm_head (or embed_tokens.weight^T when tied)  [B, S, V]
//
// Made to be taken apart by the parallel techniques: the projections are AnyModules
// (tensor parallelism swaps in column/row-parallel linears), the attention core is a
// std::function (context parallelism swaps in ring attention), positions can start at
// an offset, and the layer list is a ModuleList (pipeline parallelism keeps a slice).
//
// ---- Shape alphabet (used in every comment of the project) ----------------------
//   B    micro-batch size (sequences)         S    sequence length
//   S_cp sequence chunk per cp rank, S / cp   H    hidden size
//   nH   attention (query) heads              nKV  key/value heads
//   Hd   head dim, H / nH                     I    MLP intermediate size
//   V    vocabulary size                      L    decoder layers
//
// Test: build/tests/unit_tests "[model]"   (or ctest -L unit)
#pragma once

#include <functional>

#include <torch/torch.h>

#include "picotron/config.h"

namespace picotron {

// y = x / sqrt(mean(x^2) + eps) * weight, computed in fp32 (fp64 for fp64 inputs).
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // [..., H] -> [..., H]
  torch::Tensor weight;                            // [H], initialised to ones
  double eps;
};
TORCH_MODULE(RMSNorm);

// RoPE tables for positions [offset, offset + S): cos and sin, [S, Hd], in `dtype`.
// Hugging Face convention: inv_freq_i = theta^(-2i/Hd) for i < Hd/2, and the table is
// [freqs, freqs] so that rotate_half pairs dimension j with j + Hd/2.
struct RopeTables {
  torch::Tensor cos, sin;  // [S, Hd]
};
RopeTables rope_tables(int64_t head_dim, double theta, int64_t seq_len, int64_t offset,
                       torch::ScalarType dtype, torch::Device device);
// x * cos + rotate_half(x) * sin, with rotate_half([x1, x2]) = [-x2, x1].
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& t);  // [B, n, S, Hd]

// q [B, nH, S, Hd], k and v [B, nKV, S, Hd] -> [B, nH, S, Hd]
using AttentionCore = std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v)>;
// Default core: causal softmax(q k^T / sqrt(Hd)) v through scaled_dot_product_attention,
// each group of nH/nKV query heads sharing one key/value head.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);  // [B, S, H] -> [B, S, H]
  torch::nn::AnyModule q_proj, k_proj, v_proj, o_proj;
  AttentionCore core = causal_attention;
  int64_t num_heads, num_kv_heads, head_dim;  // local counts (tensor parallelism divides them)
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // [B, S, H] -> [B, S, H]
  torch::nn::AnyModule gate_proj, up_proj, down_proj;
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);  // [B, S, H] -> [B, S, H]
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(DecoderLayer);

// The body: registered as "model" so names read "model.layers.0....".
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const LlamaConfig& c);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(LlamaModel);

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  explicit LlamaForCausalLMImpl(const LlamaConfig& c);
  // tokens [B, S] (int64) -> logits [B, S, V]. Positions start at `position_offset`.
  torch::Tensor forward(const torch::Tensor& tokens, int64_t position_offset = 0);
  // Mean next-token cross-entropy: logits of tokens [B, S] against targets [B, S],
  // computed in fp32 when the model runs in bf16/fp16.
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets);

  LlamaConfig config;
  LlamaModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tie_word_embeddings

 private:
  // RoPE tables of the last (S, offset, dtype, device): built once, not every forward
  // (building them on the CPU and copying to a GPU would sync the host each step).
  const RopeTables& rope_for(int64_t seq_len, int64_t offset, torch::ScalarType dtype, torch::Device device);
  RopeTables rope_cache_;
  int64_t rope_len_ = -1, rope_offset_ = -1;
};
TORCH_MODULE(LlamaForCausalLM);

// A linear layer without bias, [in] -> [out], wrapped for the AnyModule slots.
torch::nn::AnyModule make_linear(int64_t in, int64_t out);

}  // namespace picotron
