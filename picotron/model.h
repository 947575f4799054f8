// picotron/model.h — LLaMA: embedding, RMSNorm, RoPE, grouped-query attention,
// SwiGLU MLP, final norm, lm_head (tied or not).
//
// Parameter names are Hugging Face's ("model.layers.3.self_attn.q_proj.weight",
// "lm_head.weight"), so initialisation (keyed by name), checkpoints and weight import
// all speak the same language.
//
//   tokens [B, S]
//     -> embed(tokens):       embed_tokens                        [B, S, H]
//     -> run_layers(x, pos):  this rank's DecoderLayers, each     [B, S, H]
//          x = x + o_proj(core(rope(q), rope(k), v))   (input_layernorm first)
//          x = x + down_proj(silu(gate_proj(x)) * up_proj(x))   (post_attention_layernorm first)
//     -> final_norm(x):       norm                                [B, S, H]
//     -> logits(h) / loss_from_hidden(h, targets):  lm_head       [B, S, V] / scalar
//
// Built from a ShardPlan (picotron/shard.h): the model allocates exactly the tensors
// the plan lists, each with its LOCAL shape, directly on the requested device and
// dtype. A layer exists if the plan holds its parameters (a pipeline stage holding
// layers 8-15 still calls them model.layers.8 ...), the embedding if the plan holds
// "model.embed_tokens.weight", and so on. Nothing here knows any parallel technique.
//
// The seams (slots) a technique replaces instead of editing this file:
//   projections   q/k/v/o_proj, gate/up/down_proj   AnyModule; replace with replace_slot()
//   embedding     LlamaModel::embed_tokens          AnyModule (ids [B, S] -> [B, S, H])
//   head          LlamaForCausalLM::head            hidden -> logits (default: @ head_weight()^T)
//   loss          LlamaForCausalLM::loss_fn         final hidden states + targets -> mean loss
//   attention     Attention::core                   q, k, v -> attention output
//   norm          RMSNorm::norm                     x, weight, eps -> normalised x (rms_norm)
//   rotation      Attention::rotate                 q, k -> q, k turned by RoPE (rope_qk)
//   activation    MLP::activation                   gate, up -> silu(gate) * up (swiglu)
//   feed-forward  DecoderLayer::feed_forward        a block in place of the dense MLP (AnyModule;
//                                                   a mixture of experts: expert_parallel/moe.h)
//   layer stats   LlamaForCausalLM::layer_stats     what blocks record over a forward for a loss term
//   block entry   Attention::enter / MLP::enter     the input before the projections
//   block exit    Attention::exit / MLP::exit       the output after o_proj / down_proj
//   layer wrappers LlamaForCausalLM::layer_wrappers every decoder layer runs inside them, in order
//   part runner   LlamaForCausalLM::part_runner     the embedding ("embed") and, in forward(),
//                                                   loss() and head_loss(), final norm + head + loss ("head")
//   positions     run_layers(x, positions)          RoPE angles from any positions tensor
// A variant of a piece is a function in its slot: the fused kernels (kernels/use_kernels.cpp)
// and selective recompute (picotron/recompute.h, which wraps a slot's function) alike.
// Local head counts come from the projections' output sizes, never from the config.
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
#include <memory>
#include <tuple>

#include <torch/torch.h>

#include "picotron/config.h"
#include "picotron/shard.h"

namespace picotron {

// y = x W^T, no bias; W [out, in] (a shard's local shape).
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, torch::TensorOptions opts = {});
  torch::Tensor forward(const torch::Tensor& x);  // [..., in] -> [..., out]
  torch::Tensor weight;                            // [out, in]
};
TORCH_MODULE(Linear);

// Row lookup: ids [B, S] -> weight[ids] [B, S, H]; weight [V, H].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num, int64_t dim, torch::TensorOptions opts = {});
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;  // [V, H]
};
TORCH_MODULE(Embedding);

// y = x / sqrt(mean(x^2) + eps) * weight, computed in fp32 (fp64 for fp64 inputs).
using NormFn = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& weight, double eps)>;
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);  // [..., H], ATen
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, torch::TensorOptions opts = {});
  torch::Tensor forward(const torch::Tensor& x);  // [..., H] -> [..., H]: norm(x, weight, eps)
  torch::Tensor weight;                            // [H], ones
  double eps;
  NormFn norm = rms_norm;                          // slot (--kernels fused: kernels/rmsnorm.cu)
};
TORCH_MODULE(RMSNorm);

// RoPE tables for the given positions (any set: 0..S-1, an offset, or two separate
// chunks under zigzag context parallelism): cos and sin, [S, Hd], in `dtype`.
// Hugging Face convention: inv_freq_i = theta^(-2i/Hd) for i < Hd/2, and the table is
// [freqs, freqs] so that rotate_half pairs dimension j with j + Hd/2.
struct RopeTables {
  torch::Tensor cos, sin;  // [S, Hd]
};
RopeTables rope_tables(int64_t head_dim, double theta, const torch::Tensor& positions, torch::ScalarType dtype,
                       torch::Device device);
// x * cos + rotate_half(x) * sin, with rotate_half([x1, x2]) = [-x2, x1].
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& t);  // [B, n, S, Hd]
// q [B, S, nH, Hd] and k [B, S, nKV, Hd] rotated, in the same layout: the rotation slot.
using RotateFn = std::function<std::tuple<torch::Tensor, torch::Tensor>(const torch::Tensor& q, const torch::Tensor& k,
                                                                         const RopeTables& t)>;
std::tuple<torch::Tensor, torch::Tensor> rope_qk(const torch::Tensor& q, const torch::Tensor& k, const RopeTables& t);

// gate, up [B, S, I] -> silu(gate) * up: the MLP's activation slot.
using ActivationFn = std::function<torch::Tensor(const torch::Tensor& gate, const torch::Tensor& up)>;
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// What a block's input goes through before its projections (tensor parallelism: f,
// "copy to tp"), or its output after them (g, "reduce from tp"). Empty: identity.
using BlockMap = std::function<torch::Tensor(const torch::Tensor& x)>;

// q [B, nH, S, Hd], k and v [B, nKV, S, Hd] -> [B, nH, S, Hd]
using AttentionCore = std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v)>;
// Default core: causal softmax(q k^T / sqrt(Hd)) v through scaled_dot_product_attention,
// each group of nH/nKV query heads sharing one key/value head.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Replace the module in a slot AND in its owner's registered children, so that
// named_parameters() lists the new parameters. (Assigning the AnyModule alone leaves the
// old child registered: its weight would still be listed, and the new one would never
// be seen by the optimizer: it would silently never train.)
void replace_slot(torch::nn::Module& owner, const std::string& name, torch::nn::AnyModule& slot,
                  torch::nn::AnyModule replacement);

class AttentionImpl : public torch::nn::Module {
 public:
  // `prefix`: "model.layers.3.self_attn." — where the plan keeps this block's records.
  AttentionImpl(const LlamaConfig& c, const ShardPlan& plan, const std::string& prefix, torch::TensorOptions opts);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);  // [B, S, H] -> [B, S, H]
  torch::nn::AnyModule q_proj, k_proj, v_proj, o_proj;
  AttentionCore core = causal_attention;
  BlockMap enter, exit;  // around the block: x -> enter -> q/k/v ... o_proj -> exit
  RotateFn rotate = rope_qk;  // slot (--kernels fused: kernels/rope.cu, q and k at once)
  int64_t head_dim;
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(const ShardPlan& plan, const std::string& prefix, torch::TensorOptions opts);
  torch::Tensor forward(const torch::Tensor& x);  // [B, S, H] -> [B, S, H]
  torch::nn::AnyModule gate_proj, up_proj, down_proj;
  BlockMap enter, exit;  // around the block: x -> enter -> gate/up ... down_proj -> exit
  ActivationFn activation = swiglu;  // slot (--kernels fused: kernels/swiglu.cu, one kernel each way)
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const LlamaConfig& c, const ShardPlan& plan, const std::string& prefix, torch::TensorOptions opts);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);  // [B, S, H] -> [B, S, H]
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  MLP mlp{nullptr};  // the dense SwiGLU MLP, when the plan holds one ("mlp.")
  // Otherwise the block in its place, [B, S, H] -> [B, S, H], installed after construction
  // (a mixture of experts, "block_sparse_moe": expert_parallel/moe.h, add_experts).
  torch::nn::AnyModule feed_forward;
};
TORCH_MODULE(DecoderLayer);

// The decoder layers this rank holds, registered under their GLOBAL index ("8", "9",
// ...), so a pipeline stage's names match the single-process model's.
class DecoderStackImpl : public torch::nn::Module {
 public:
  void add(int64_t global_index, DecoderLayer layer);
  std::vector<std::pair<int64_t, DecoderLayer>> items;  // ascending global index
};
TORCH_MODULE(DecoderStack);

// The body: registered as "model" so names read "model.layers.0....".
class LlamaModelImpl : public torch::nn::Module {
 public:
  LlamaModelImpl(const LlamaConfig& c, const ShardPlan& plan, torch::TensorOptions opts);
  torch::nn::AnyModule embed_tokens;   // empty when the plan holds no embedding
  DecoderStack layers{nullptr};
  RMSNorm norm{nullptr};               // null when the plan holds no final norm
};
TORCH_MODULE(LlamaModel);

// Statistics that blocks record over the layers of one forward and that the loss needs
// whole (a mixture of experts: each router's counts and probabilities, for the balancing
// loss; expert_parallel/moe.h). The model's one hook for them: each forward starts them
// afresh, and the loss adds the term they give. How they travel beside a pipeline's
// activation (pipeline_parallel.h, SideTensors, joined by train.cpp) and keep their
// gradient path through recompute (picotron/recompute.h, RecomputedRecords) is each of
// those techniques' own protocol.
class LayerStats {
 public:
  virtual ~LayerStats() = default;
  virtual void start() = 0;  // a new forward: drop what was recorded and carried
  // At the loss, when training: the term to add (a 0-d tensor; undefined: none).
  virtual torch::Tensor loss_term() = 0;
};

// One run of decoder layer `index` (its global index): what a layer wrapper sees. next(x)
// runs the rest: the wrappers inside this one, then layer->forward(x, rope). `next`
// holds the layer and the RoPE tables by value, so a wrapper may keep it for backward
// (recompute runs it again there).
struct LayerCall {
  int64_t index;
  DecoderLayer layer;
  std::function<torch::Tensor(const torch::Tensor& x)> next;  // [B, S, H] -> [B, S, H]
};
// Runs a layer inside something: wrapper(call, x) must return call.next(x), doing its
// own work around it (communication, saving less for backward, ...).
struct LayerWrapper {
  std::string name;  // "recompute", "zero-3"
  std::function<torch::Tensor(const LayerCall& call, const torch::Tensor& x)> wrap;
};
// Runs one of the parts around the decoder layers: `part` is "embed" (embed()) or "head"
// (the final norm with logits or the loss, as forward() and loss() run them); `run`
// computes it. ZeRO-3 gathers the part's parameters around it.
using PartRunner = std::function<torch::Tensor(const std::string& part, const std::function<torch::Tensor()>& run)>;
using HeadFn = std::function<torch::Tensor(const torch::Tensor& hidden)>;  // [B, S, H] -> [B, S, V(/tp)]
using LossFn = std::function<torch::Tensor(const torch::Tensor& hidden, const torch::Tensor& targets)>;

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  // Only what `plan` lists is allocated, with its local shape, on `opts`' device and
  // dtype (uninitialised: call init_parameters). Without a plan: the whole model.
  LlamaForCausalLMImpl(const LlamaConfig& c, const ShardPlan& plan, torch::TensorOptions opts = {});
  explicit LlamaForCausalLMImpl(const LlamaConfig& c) : LlamaForCausalLMImpl(c, replicated_plan(c)) {}

  // ---- the forward pass, in the pieces a pipeline stage runs -------------------
  torch::Tensor embed(const torch::Tensor& tokens);  // [B, S] -> [B, S, H]
  // This rank's layers in order, each through layer_runner. positions: [S] int64, the
  // RoPE positions of the S tokens attention sees; undefined means 0..x.size(1)-1. (Under
  // sequence parallelism x is [B, S/tp, H] and attention sees S tokens: pass the S
  // positions, as forward() and loss() do.)
  // first/count: only the held layers with global index in [first, first + count) (a
  // pipeline rank's model chunk); by default all of them.
  torch::Tensor run_layers(torch::Tensor x, const torch::Tensor& positions = {}, int64_t first = 0,
                           int64_t count = INT64_MAX);  // [B, S, H] -> [B, S, H]
  torch::Tensor final_norm(const torch::Tensor& x);                                 // [B, S, H] -> [B, S, H]
  torch::Tensor logits(const torch::Tensor& hidden);                                // head slot: -> [B, S, V]
  // Mean next-token cross-entropy over the B*S tokens (fp32 softmax for bf16/fp16).
  torch::Tensor loss_from_hidden(const torch::Tensor& hidden, const torch::Tensor& targets);  // loss slot
  // final_norm + loss_from_hidden through the part runner ("head"): a pipeline's last stage.
  torch::Tensor head_loss(const torch::Tensor& hidden, const torch::Tensor& targets);  // [B, S, H] -> scalar

  // The whole model on one rank: tokens [B, S] -> logits [B, S, V] / mean loss.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions = {});
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets, const torch::Tensor& positions = {});

  // The lm_head matrix [V, H]: lm_head's weight, or (tied) the weight of whatever
  // module sits in the embedding slot.
  torch::Tensor head_weight();

  // Throws unless this model holds every parameter `plan` lists (the constructor, and
  // whoever fills a slot from the plan after it). feed_forward_to_come: except inside the
  // layers left without an MLP, whose block is installed next (add_experts).
  void check_holds(const ShardPlan& plan, bool feed_forward_to_come = false);

  // What the blocks record over a forward for a term of the loss (null: nothing; a
  // mixture of experts installs its router log: expert_parallel/moe.h). loss() starts it,
  // head_loss() adds its term when training.
  std::shared_ptr<LayerStats> layer_stats;

  LlamaConfig config;
  LlamaModel model{nullptr};
  torch::nn::AnyModule lm_head;  // empty when tied (or when the plan holds no head)

  // ---- slots (empty: the single-process default) --------------------------------
  HeadFn head;                // default: hidden @ head_weight()^T
  LossFn loss_fn;             // default: cross_entropy(logits(hidden), targets) in fp32
  PartRunner part_runner;     // default: run()
  // What every decoder layer runs inside, OUTERMOST FIRST; empty: layer->forward(x, rope).
  // train.cpp installs them inner to outer, each with wrap_layers, so that a run reads
  //   zero-3 (zero/zero3.h: the layer's parameters gathered before it, released after)
  //   -> recompute (picotron/recompute.h: only the input kept; the layer runs again in
  //      backward, inside the gather, which ZeRO-3 repeats for backward)
  //   -> layer->forward
  std::vector<LayerWrapper> layer_wrappers;
  // Installs `wrapper` around every wrapper already there (it becomes the outermost).
  void wrap_layers(LayerWrapper wrapper) { layer_wrappers.insert(layer_wrappers.begin(), std::move(wrapper)); }
  // Removes the wrapper named `name` (a technique's destructor).
  void unwrap_layers(const std::string& name);
  // Layer `index` on x: depth 0 puts it in its place (picotron/step_place.h), depth d >= 1 runs
  // it through the wrappers from layer_wrappers[d - 1] on. [B, S, H] -> [B, S, H]
  torch::Tensor run_layer(int64_t index, DecoderLayer layer, const torch::Tensor& x, const RopeTables& rope,
                          size_t depth = 0);

 private:
  // RoPE tables of the last (positions, dtype, device): built once, not every forward
  // (building them on the CPU and copying to a GPU would sync the host each step).
  const RopeTables& rope_for(const torch::Tensor& positions, int64_t seq_len, torch::ScalarType dtype,
                             torch::Device device);
  RopeTables rope_cache_;
  torch::Tensor rope_positions_;  // [S] int64 on the CPU: what the cache was built for
};
TORCH_MODULE(LlamaForCausalLM);

// A bias-free linear of a record's local shape ([out, in]), wrapped for the AnyModule slots.
torch::nn::AnyModule make_linear(const ShardRecord& record, torch::TensorOptions opts = {});

}  // namespace picotron
