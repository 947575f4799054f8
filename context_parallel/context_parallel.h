// context_parallel/context_parallel.h — context parallelism: every cp rank holds a slice
// of each sequence (cp_layout.h says which tokens), and attention, the only place where
// tokens meet, passes the keys and values around a ring (Liu et al., Ring Attention,
// arXiv 2310.01889; the block math is FlashAttention-2's, arXiv 2307.08691).
//
//   tokens [B, S] -> my tokens [B, S/C] (and their positions, for RoPE; the targets too)
//   embedding, norms, projections, MLP, loss: token by token, unchanged on [B, S/C, H]
//   attention core: q [B, nH, S/C, Hd] against ALL keys, arriving block by block:
//
//     step 0:  my own k, v             send them to rank r+1, receive rank r-1's (async)
//     step s:  rank (r-s)'s k, v       compute while the next block travels
//     ...      C steps; each block's partial output is merged into the running one by
//              its log-sum-exp (below), so the full [S, S] scores never exist
//
// The merge. A block gives o_b = softmax(s_b) v_b and lse_b = log sum exp(s_b) per query
// row. Two partial results over disjoint key sets combine exactly:
//
//   lse = log(e^lse_1 + e^lse_2) = max + log1p(exp(-|lse_1 - lse_2|))   (never overflows)
//   o   = o_1 e^(lse_1 - lse) + o_2 e^(lse_2 - lse)
//
// since o_i e^(lse_i) = sum over keys of e^s v: the weights simply re-normalise.
//
// Backward: with the final o and lse saved, each block's gradient is the flash backward
// of that block alone (P = exp(s - lse), D = rowsum(dO * o)), recomputed as the keys
// and values go round the ring again. dQ stays here (fp32); dK and dV of a block travel
// WITH it, each rank adding its part, and arrive back at their owner after the C-th hop.
//
// Only the nKV key/value heads travel (grouped-query attention), never the repeated ones.
// Messages per rank, per layer and micro-batch, of 2·B·(S/C)·nKV·Hd elements each:
// forward C-1 (k, v); backward C-1 (k, v) + C (dk, dv).
//
// Test: ctest -R "context_parallel|equivalence.cp"
#pragma once

#include <torch/torch.h>

#include "context_parallel/cp_layout.h"
#include "picotron/config.h"
#include "picotron/comm.h"
#include "picotron/mesh.h"
#include "picotron/model.h"

namespace picotron {

// The attention-core slot for ring attention over `cp` (rank i holds cp_positions(.., i, ..)).
// q [B, nH, S/C, Hd], k and v [B, nKV, S/C, Hd] -> [B, nH, S/C, Hd]. With C = 1: one causal
// block, no communication.
AttentionCore ring_attention(Comm& cp, CpLayout layout);

// How context parallelism runs: which tokens a rank holds, and how attention meets the
// others' (--cp-layout, --cp-mode, --cp-ulysses; ulysses.h for the all-to-all modes).
struct CpSettings {
  CpLayout layout = CpLayout::kZigzag;
  CpMode mode = CpMode::kRing;
  int ulysses = 0;  // hybrid: the all-to-all group size U (cp/U ranks form each ring)
};  // (built from the flags by runtime/cli/settings.h: cp_settings)

// One line: the layout, the mode, the tokens per rank and each cp rank's attention work.
std::string cp_summary(const CpSettings& s, int C, int64_t seq_len);

// The hybrid's groups as world ranks, one line each for the all-to-all groups and the rings
// of every cp group of the mesh ("cp all-to-all groups: [0 1] [2 3]"; picotron/mesh.h's
// describe_mesh lists the axes' groups the same way); "" for ring and ulysses.
std::string cp_groups_text(const CpSettings& s, const MeshShape& shape);

// Every decoder layer's attention core becomes ring attention over mesh.cp() (ring), the
// all-to-alls of ulysses.h around the layer's own core (ulysses), or the all-to-alls over
// groups of U cp ranks around ring attention over cp/U ranks (hybrid: the groups are
// split from mesh.cp() here, named "cp_a2a" and "cp_ring", and live with the cores).
void apply_context_parallel(LlamaForCausalLM& model, Mesh& mesh, const CpSettings& settings);

// One block on this device: out [B, nH, Sq, Hd] and lse [B, nH, Sq] (fp32, fp64 for fp64)
// of q against k, v (nKV heads), causal or full; and its backward given the FINAL out and
// lse of those query rows. CPU: ATen's flash kernel for the CPU. Other devices: the same
// math on the explicit [Sq, Sk] scores of the block (exposed to test it against the kernel).
struct BlockResult {
  torch::Tensor out, lse;
};
BlockResult attention_block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                            bool explicit_scores = false);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_block_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, bool causal, bool explicit_scores = false);

}  // namespace picotron
