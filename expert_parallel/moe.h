// expert_parallel/moe.h — a mixture-of-experts block in place of the MLP (Mixtral, arXiv
// 2401.04088; the load-balancing loss of the Switch Transformer, arXiv 2101.03961, as
// Hugging Face transformers computes it for Mixtral).
//
//   x [T, H] ─► router: logits = x Wg^T [T, E] ─► p = softmax(logits) [T, E]
//            ─► top-k of p per token: experts idx [T, k], weights w = p_idx / sum_k p_idx
//   y_t = sum_{j<k} w_tj · expert_{idx_tj}(x_t),   expert(x) = W2 (silu(W1 x) * (W3 x))
//
// Dropless: every token reaches its k experts, however many pick the same one, so a
// parallel run computes exactly what one process computes.
//
// Load balancing (per forward call, i.e. per micro-batch, over all its MoE layers: the
// R = L·T router rows of this micro-batch):
//
//   f_e = (1/R) · #{(row, slot) routed to e}      P_e = (1/R) · sum_rows p_e
//   aux = E · sum_e f_e · P_e                     loss = cross-entropy + c · aux
//
// f is a count (no gradient); the gradient reaches the router through P. With tokens
// spread evenly (f_e = k/E, P_e = 1/E) aux = k: its minimum.
//
// The block sits in the decoder layer's feed_forward slot and its statistics in the
// model's layer_stats (picotron/model.h): add_experts installs both after the model is
// built; expert parallelism (expert_parallel.h) then replaces how the experts run.
//
// This header, in reading order: an expert, the routing, the block, add_experts; then the
// router's statistics (RouterLog: what the loss reads, how a pipeline carries it, how the
// cp / sp ranks sum it).
//
// Test: build/tests/unit_tests "[moe]"; ctest -R equivalence.moe
#pragma once

#include <map>
#include <memory>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/config.h"
#include "picotron/model.h"
#include "picotron/recompute.h"
#include "picotron/shard.h"

namespace picotron {

// One expert: a SwiGLU MLP with Mixtral's names w1 (gate), w2 (down), w3 (up).
class ExpertImpl : public torch::nn::Module {
 public:
  ExpertImpl(int64_t hidden, int64_t intermediate, torch::TensorOptions opts);
  torch::Tensor forward(const torch::Tensor& x);  // [n, H] -> [n, H]
  torch::Tensor w1, w2, w3;                       // the weights of w1 [I, H], w2 [H, I], w3 [I, H]
};
TORCH_MODULE(Expert);

// Routing of T tokens: the k experts of each and their normalised weights.
struct Routing {
  torch::Tensor experts;  // [T, k] int64
  torch::Tensor weights;  // [T, k] compute dtype
};
// The routing of a router's probabilities p [T, E]: top-k, weights normalised to sum 1.
Routing route(const torch::Tensor& probs, int64_t k, torch::ScalarType weight_dtype);
// Runs the experts on the routed tokens and combines: [T, H] -> [T, H]. The default runs
// every expert here; expert parallelism replaces it.
using ExpertRunner = std::function<torch::Tensor(const torch::Tensor& x, const Routing& r)>;

struct RouterLog;  // what forward() records for the load-balancing loss (below)

class MoEImpl : public torch::nn::Module {
 public:
  // `prefix`: "model.layers.3.block_sparse_moe." (the plan holds the router and the experts).
  MoEImpl(const LlamaConfig& c, const ShardPlan& plan, const std::string& prefix, int64_t layer_index,
          torch::TensorOptions opts);
  torch::Tensor forward(const torch::Tensor& x);  // [B, S, H] -> [B, S, H]
  // Every expert's tokens through it, weighted and summed back (the dropless combine).
  torch::Tensor run_experts(const torch::Tensor& x, const Routing& r);  // [T, H] -> [T, H]

  torch::Tensor gate;                 // the router's weight [E, H] (module "gate")
  std::map<int64_t, Expert> experts;  // by global expert index: those this rank holds
  int64_t num_experts, top_k, layer_index;
  ExpertRunner runner;                // empty: run_experts
  std::shared_ptr<RouterLog> log;     // where forward() records its routing (add_experts sets it)
};
TORCH_MODULE(MoE);

// A mixture of experts in place of each held layer's MLP, when the config has experts
// (c.is_moe()): the blocks in the layers' feed_forward slots (registered as
// "block_sparse_moe", Mixtral's name, with the experts `plan` lists) and one RouterLog as
// the model's layer_stats. Call it right after building the model. Returns the log (null
// for a dense model).
std::shared_ptr<RouterLog> add_experts(LlamaForCausalLMImpl& model, const ShardPlan& plan, torch::TensorOptions opts);
// The mixture of experts in a layer, or null (a dense layer).
MoEImpl* moe_of(DecoderLayerImpl& layer);

// ---- the router's statistics: what the load-balancing loss reads -------------------
// Each MoE block's forward records its counts and summed probabilities here; the loss
// (aux_loss) reads them once per micro-batch. Pipeline parallelism carries them from stage
// to stage as a side tensor, and cp / sp ranks sum them (router_stats_sum).

// What the routers of one forward saw (one micro-batch), for the loss and the metrics: the
// model's LayerStats in a mixture of experts, n = 2E + 1 ([counts | probs | rows]).
struct RouterLog : LayerStats, RecomputedRecords {
  RouterLog(int64_t num_experts, double coef, torch::TensorOptions stats_opts)
      : num_experts(num_experts), coef(coef), stats_opts(stats_opts) {}
  struct Layer {
    torch::Tensor counts;  // [E] fp64, no grad: (row, slot) pairs routed to each expert
    torch::Tensor probs;   // [E] accumulation dtype, with grad: sum over rows of p
    int64_t rows = 0;      // T: the tokens of this forward in this layer
  };
  std::map<int64_t, Layer> layers;  // by layer index: a recomputed forward overwrites, never adds
  // Pipeline parallelism: the earlier stages' statistics of this micro-batch ([2E + 1],
  // received with the activation; pipeline_parallel.cpp), added to this stage's.
  torch::Tensor carried;
  // Context (and sequence) parallelism: the cp (tp) ranks hold parts of the same sequences,
  // so the statistics of a micro-batch are their sum (router_stats_sum); empty: this rank's.
  std::function<torch::Tensor(const torch::Tensor&)> sum_over_ranks;
  // [counts | probs | rows] of the layers logged, [2E + 1] in the accumulation dtype
  // (undefined when none is); probs carry the gradient.
  torch::Tensor stats() const;
  // c · aux of the layers logged and the carried statistics (a 0-d tensor; undefined when
  // no layer is logged).
  torch::Tensor aux_loss(int64_t num_experts, double coef) const;
  torch::Tensor counts() const;  // [E] fp64: the sum over the layers logged

  int64_t num_experts;              // E
  double coef;                      // c: router_aux_loss_coef
  torch::TensorOptions stats_opts;  // [2E + 1]'s: the accumulation dtype, on the model's device
  // Tokens per expert over the step so far ([E] fp64; undefined before the first training
  // forward): each adds its routing; the step line's metric reads and clears it
  // (global_tokens_per_expert, expert_parallel.h).
  torch::Tensor routed_tokens;

  // ---- LayerStats (picotron/model.h): the model's hook ----
  void start() override;
  torch::Tensor loss_term() override;  // counts routed_tokens; c · aux when c > 0
  // ---- RecomputedRecords (picotron/recompute.h): a layer's probs through recompute ----
  torch::Tensor recorded(int64_t layer) override;
  void rerecord(int64_t layer, const torch::Tensor& t) override { layers.at(layer).probs = t; }
  // ---- a pipeline's side tensors (pipeline_parallel.h, SideTensors; train.cpp joins them):
  // one, [counts | probs | rows] of this micro-batch's layers so far: [2E + 1].
  std::vector<torch::Tensor> side_buffers() const { return {torch::empty({2 * num_experts + 1}, stats_opts)}; }
  void carry(const std::vector<torch::Tensor>& earlier) { carried = earlier.at(0); }
  std::vector<torch::Tensor> take();
};

// The model's router log, or null (a dense model).
RouterLog* router_log_of(LlamaForCausalLMImpl& model);

// The sum of [counts | probs | rows] over the ranks that split each sequence: the cp group
// and, under sequence parallelism, the tp group (either may be null).
//   cp: fwd all-reduce(sum), bwd all-reduce(sum). Every cp rank's loss adds the same aux
//       and data parallelism AVERAGES the gradients over cp, leaving one aux's gradient.
//   tp: fwd all-reduce(sum), bwd identity. Each tp rank's backward computes its tokens'
//       share of the one loss's gradient, and the gradients of what tp does not split
//       (the router, the experts) are SUMMED over tp (sync_sequence_parallel_grads).
std::function<torch::Tensor(const torch::Tensor&)> router_stats_sum(Comm* cp, Comm* tp_sp);
// Installs that sum in the model's router log (a dense model, or both null: nothing).
void sum_routing_over(LlamaForCausalLMImpl& model, Comm* cp, Comm* tp_sp);

}  // namespace picotron
