// tensor_parallel/tensor_parallel.h — tensor parallelism (Megatron-LM, arXiv 1909.08053;
// the Ultra-Scale Playbook, "Tensor Parallelism").
//
// Each tp rank holds a slice of every weight matrix and computes its part of each block:
//
//   attention:  x ─f─┬─ q_proj [nH/tp·Hd, H] ─┐
//                    ├─ k_proj [nKV/tp·Hd, H] ─┼─ nH/tp heads ─ o_proj [H, nH/tp·Hd] ─g─> y
//                    └─ v_proj [nKV/tp·Hd, H] ─┘
//   MLP:        x ─f─┬─ gate_proj [I/tp, H] ─┐
//                    └─ up_proj   [I/tp, H] ─┴─ silu(gate)·up ─ down_proj [H, I/tp] ─g─> y
//   column-parallel (q, k, v, gate, up): rows of W;  row-parallel (o, down): columns of W
//
//   f  "copy to tp"      fwd: identity                 bwd: all-reduce over tp
//   g  "reduce from tp"  fwd: all-reduce over tp       bwd: identity
//
// Why it is exact: a column-parallel linear computes the rows of y = x W^T that its rows
// of W produce (y_r = x W_r^T), so the heads (and the MLP's I columns) are simply split;
// a row-parallel linear computes x_r W_r^T, and the sum over ranks is x W^T: g's
// all-reduce. In backward, every rank's x fed every rank's slice, so dL/dx is the sum
// over ranks of the partial input gradients: f's all-reduce.
//
// Vocabulary: the embedding [V, H] is split by rows (vocab-parallel): a rank looks up the
// ids in its range [V_r, V_r + V/tp), writes zeros for the others, and g sums. The head
// (the same matrix when tied) gives [B, S, V/tp] logits per rank, and the cross-entropy
// is computed from these shards without ever forming [B, S, V]:
//   m = max over tp of the local maxima        (all-reduce max)
//   Z = sum over tp of sum_v exp(z_v - m)      (all-reduce sum)
//   z_t - m from the rank that holds target t  (all-reduce sum; the others give 0)
//   loss = log Z - (z_t - m);   dz_v = softmax_v - [v == t]  on each rank's own v
//
// Communication per step, per micro-batch (N = B·S tokens; L layers; ledger elements):
//   forward:  2 L all-reduces of N·H (g) + 1 of N·H (embedding g) + 3 of N (loss)
//   backward: 2 L all-reduces of N·H (f) + 1 of N·H (the head's f)
//
// Sequence parallelism (--sp; Korthikanti et al., arXiv 2205.05198). Between the blocks,
// the residual stream and the RMSNorms need no weights split: split them along the
// sequence instead, [B, S/tp, H] per rank, and f/g become their sequence versions:
//
//   [B,S/tp,H] ─norm─ gather_sequence ─[B,S,H]─ block ─ reduce_scatter_sequence ─[B,S/tp,H] ─ + residual
//
//   gather_sequence           fwd: all-gather along S       bwd: reduce-scatter along S
//   reduce_scatter_sequence   fwd: reduce-scatter along S   bwd: all-gather along S
//
// An all-reduce is a reduce-scatter then an all-gather, so the volume is the same as
// without SP, while activation memory between blocks drops by tp. The norm gains are
// replicated, but each rank now sees only S/tp of the tokens: their gradients must be
// summed over tp after backward (sync_sequence_parallel_grads).
//   forward:  2L+1 all-gathers and 2L+1 reduce-scatters of N·H, 3 all-reduces of N
//   backward: 2L+1 reduce-scatters and 2L+1 all-gathers of N·H
//   per step: 1 all-reduce of the norm gains' gradients, (2L + 1)·H
//
// Test: ctest -R tensor_parallel ; equivalence: ctest -R equivalence.tp
#pragma once

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/shard.h"

namespace picotron {

// ---- the conjugate communication ops (Megatron's f and g) ----------------------------
torch::Tensor copy_to_tp(const torch::Tensor& x, Comm& tp);      // fwd: identity   bwd: all-reduce over tp
torch::Tensor reduce_from_tp(const torch::Tensor& x, Comm& tp);  // fwd: all-reduce over tp   bwd: identity
// ... and their sequence-parallel versions, [B, S/tp, H] <-> [B, S, H] (rank r holds
// positions [r·S/tp, (r+1)·S/tp)).
torch::Tensor gather_sequence(const torch::Tensor& x, Comm& tp);          // fwd: all-gather along S   bwd: reduce-scatter along S
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, Comm& tp);  // fwd: reduce-scatter along S   bwd: all-gather along S

// Rows [offset, offset + V/tp) of the embedding; out-of-range ids give zeros before g.
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  // `weight`: this rank's [V/tp, H] slice (the tensor the model built; kept, not copied).
  // sequence_parallel: hand on [B, S/tp, H] (a reduce-scatter instead of g's all-reduce).
  VocabParallelEmbeddingImpl(torch::Tensor weight, int64_t vocab_offset, Comm& tp, bool sequence_parallel);
  torch::Tensor forward(const torch::Tensor& ids);  // [B, S] -> [B, S, H] (SP: [B, S/tp, H])
  torch::Tensor weight;                              // [V/tp, H]
  int64_t vocab_offset;
  bool sequence_parallel;

 private:
  Comm* tp_;
};
TORCH_MODULE(VocabParallelEmbedding);

// Mean cross-entropy over N tokens from logit shards [N, V/tp] (this rank's vocabulary
// columns [vocab_offset, +V/tp)) and targets [N]; computed in the logits' dtype (the
// caller passes fp32 or fp64). Autograd Function: the backward is the local softmax
// minus the local one-hot, no communication.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           int64_t vocab_offset, Comm& tp);

// The plan: split every projection, the embedding and the lm_head over tp (rank `index`
// of `count`): q/k/v/gate/up and the vocabulary by rows, o/down by columns.
void shard_for_tensor_parallel(ShardPlan& plan, const LlamaConfig& config, int index, int count);

// Wire the model built from that plan: f/g around every attention and MLP block, the
// vocab-parallel embedding, a head that gives [B, S, V/tp] logits, and the
// vocab-parallel cross-entropy as the loss; with sequence_parallel, their sequence
// versions (the stream between blocks is [B, S/tp, H]). `plan`: the one the model was
// built from (the vocabulary offset comes from its embedding record). `tp` must outlive
// the model and every autograd graph built with it (the graph keeps a pointer to it).
void apply_tensor_parallel(LlamaForCausalLM& model, const ShardPlan& plan, Comm& tp, bool sequence_parallel);

// Sequence parallelism: sum over tp the gradients of the parameters replicated over tp
// (the norm gains, which each saw S/tp of the tokens). One all-reduce of all of them.
void sync_sequence_parallel_grads(std::vector<TrainableParam>& params, Comm& tp);

}  // namespace picotron
