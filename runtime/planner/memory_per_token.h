// runtime/planner/memory_per_token.h — what one token of a micro-batch keeps for backward,
// per decoder layer (A_layer) and at the head (A_head), under the recompute mode and the
// kernels (--kernels aten | fused), for the --dry-run estimate (memory_estimate.h). Bytes
// per token of this rank's micro-batch (T = B x S/cp tokens; /tp where tp splits the
// piece), e the compute dtype's bytes, a the accumulation dtype's. ATen's pieces are read
// off picotron/model.cpp (derived in docs/memory.md); the fused ones off what each autograd
// Function of kernels/autograd.cpp saves and what kernels/use_kernels.cpp replaces:
//
//   piece      ATen keeps (model.cpp)                   fused keeps (kernels/autograd.cpp)
//   RMSNorm    x in fp32, 1/rms, x/rms, y (read by      x, 1/rms [T], y:
//              the projections): H.a + a + 2H.e           2H.e + a (no fp32 copy)
//   SwiGLU     gate, silu(gate), up, the product:       gate, up, the product: 3I.e
//              4I.e                                       (silu recomputed in the backward)
//   RoPE       its cos/sin tables only                  the same: nothing to count
//   attention  SDPA: q, K and V repeated to nH heads,   --attention sdpa: the same core;
//              out, log-sum-exp: 4nH.Hd.e + nH.a          naive / flash-wmma / flash-mma (bf16/fp16, Hd 64
//                                                         or 128, no cp): q, k and v (nKV heads), out, and the
//                                                         [B, S, nH.Hd] copy o_proj reads: (3nH + 2nKV).Hd.e + nH.a
//                                                         (naive's S x S buffer, B.nH.S^2.4 bytes while a
//                                                         forward or backward runs, is not counted)
//   loss       the log-softmax [T, V] in fp32: V.a      dh [T, H] made in the forward: H.e; dW [V, H]
//                                                         per micro-batch: V.H.e. No [T, V] tensor kept
//   its peak   backward: d(log-softmax), d(logits),     forward, inside the chunk loop: dW's fp32 sum
//              [T, V] fp32 each: 2V.a per token           V.H.a, and c = min(4096, T) rows: the logits
//                                                         c.V.e (dlogits in place), dlogits^T in fp32 c.V.a,
//                                                         h_c in fp32 c.H.a, their dh rows c.H.e
//
// Under tensor parallelism the loss stays the vocabulary-parallel one (ATen); the final
// norm is fused either way. Selective recompute wraps the fused norms too (their 1/rms is
// recomputed): they keep x, and y for the projections. A mixture of experts keeps its experts' ATen SwiGLU
// (memory_moe.h).
//
// Measured (an H100 80GB, torch 2.11.0+cu130, `build/train --device cuda --dtype bf16
// --model smollm-1.7b --micro-batch-size 4 --seq-len 2048`, the caching allocator's peak):
// --kernels aten 54.4 GiB, fused 45.4 GiB (SDPA), fused + --attention flash-wmma 46.2 GiB.
//
// Test: build/tests/unit_tests "[memory_estimate]"
#pragma once

#include <string>

#include "runtime/cli/train_config.h"

namespace picotron {

// What `--kernels auto` means for this run (train.cpp's rule): fused on CUDA, except in
// fp64, once the kernels have passed their GPU tests (kernels::kVerifiedOnGpu). A plan and
// a --dry-run are for a build with the kernels (train.cpp also asks kernels::fused_built()).
// 1234567.0 -> "1,234,567": a count or byte figure in the estimate's formulas.
std::string count_text(double v);

bool auto_means_fused(const TrainConfig& c);

// The pieces of the run's model that the fused kernels replace.
struct FusedPieces {
  bool on = false;          // --kernels fused (or auto meaning fused): norms, RoPE, SwiGLU
  bool hand_flash = false;  // a hand-written attention core (--attention naive | flash-wmma | flash-mma)
  bool loss = false;        // the fused linear + cross-entropy (not under tp: its loss stays)
};
FusedPieces fused_pieces(const TrainConfig& c);

// Bytes per token of one micro-batch, each piece named after the tensors it keeps.
struct PerToken {
  double layer = 0;       // one decoder layer, under the recompute mode
  double layer_none = 0;  // one decoder layer without recompute (full recompute rebuilds it)
  double head = 0;        // final norm + log-softmax output (fused: dh) + the targets
  double head_fixed = 0;  // per micro-batch, not per token: the fused loss's dW
  double moe = 0;         // a mixture of experts: its block, in place of the MLP (0: dense)
  std::string layer_formula, head_formula, moe_formula;
};
PerToken per_token(const TrainConfig& c, double e, double a);

// The fused loss's chunk: kernels::linear_cross_entropy's default chunk_rows.
constexpr double kLossChunkRows = 4096;

// The fused loss's forward at its widest, over what the activations hold: dW's fp32 sum and
// one chunk (the table above), less the saved dW V.H.e that the activations count but that
// is made after the loop. `formula` gets its text.
double fused_loss_peak(const TrainConfig& c, double T, double e, double a, std::string* formula);

}  // namespace picotron
