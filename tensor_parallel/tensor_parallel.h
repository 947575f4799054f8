// tensor_parallel/tensor_parallel.h — tensor parallelism (Megatron-LM, arXiv 1909.08053;
// the Ultra-Scale Playbook, "Tensor Parallelism").
//
// Each tp rank holds a slice of every weight matrix and computes its part of each block:
//
//   attention:  x ─f─┬─ q_proj [nH/tp·Hd, H] ─┐                       (column-parallel:
//                    ├─ k_proj [nKV/tp·Hd, H] ─┼─ nH/tp heads ─ o_proj ─g─> y   rows of W)
//                    └─ v_proj [nKV/tp·Hd, H] ─┘   [B,S,nH/tp·Hd]  [H, nH/tp·Hd] (row-parallel:
//   MLP:        x ─f─┬─ gate_proj [I/tp, H] ─┐                     [B,S,H] partial  columns of W)
//                    └─ up_proj   [I/tp, H] ─┴─ silu(g)·u ─ down_proj [H, I/tp] ─g─> y
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
// Test: ctest -R tensor_parallel ; equivalence: ctest -R equivalence.tp
#pragma once

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/model.h"
#include "picotron/shard.h"

namespace picotron {

// ---- the conjugate communication ops (Megatron's f and g) ----------------------------
torch::Tensor copy_to_tp(const torch::Tensor& x, Comm& tp);      // fwd: identity   bwd: all-reduce over tp
torch::Tensor reduce_from_tp(const torch::Tensor& x, Comm& tp);  // fwd: all-reduce over tp   bwd: identity

// Rows [offset, offset + V/tp) of the embedding; out-of-range ids give zeros before g.
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  // `weight`: this rank's [V/tp, H] slice (the tensor the model built; kept, not copied).
  VocabParallelEmbeddingImpl(torch::Tensor weight, int64_t vocab_offset, Comm& tp);
  torch::Tensor forward(const torch::Tensor& ids);  // [B, S] -> [B, S, H]
  torch::Tensor weight;                              // [V/tp, H]
  int64_t vocab_offset;

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
void shard_for_tensor_parallel(ShardPlan& plan, int index, int count);

// Wire the model built from that plan: f/g around every attention and MLP block, the
// vocab-parallel embedding, a head that gives [B, S, V/tp] logits, and the
// vocab-parallel cross-entropy as the loss. `tp` must outlive the model.
void apply_tensor_parallel(LlamaForCausalLM& model, Comm& tp);

}  // namespace picotron
