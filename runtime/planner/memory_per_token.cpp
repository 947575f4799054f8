// runtime/planner/memory_per_token.cpp — A_layer and A_head, ATen's or the fused kernels'.
// See memory_per_token.h for the table of what each piece keeps.
#include "runtime/planner/memory_per_token.h"

#include <algorithm>
#include <sstream>

#include "kernels/kernels.h"
#include "picotron/recompute.h"
#include "runtime/planner/memory_moe.h"
#include "picotron/format.h"
#include "runtime/cli/train_config.h"

namespace picotron {

std::string count_text(double v) { return with_commas(int64_t(v)); }

bool auto_means_fused(const TrainConfig& c) {
  return kernels::fused_chosen("auto", c.device == "cuda", c.dtype == Precision::kFP64, /*built=*/true);
}

FusedPieces fused_pieces(const TrainConfig& c) {
  FusedPieces p;
  p.on = kernels::fused_chosen(c.kernels, c.device == "cuda", c.dtype == Precision::kFP64, /*built=*/true);
  if (!p.on) return p;
  // use_fused_kernels: the hand-written rungs take bf16/fp16 and Hd 64 or 128, and replace
  // only the model's own core (ring attention under cp stays); all else attends through SDPA.
  const int64_t hd = c.llama.head_dim();
  const bool half = c.dtype == Precision::kBF16 || c.dtype == Precision::kFP16;
  p.hand_flash = c.attention != "sdpa" && half && (hd == 64 || hd == 128) && c.cp == 1;
  p.loss = c.tp == 1;  // tensor parallelism installs its vocabulary-parallel loss first
  return p;
}

PerToken per_token(const TrainConfig& c, double e, double a) {
  const LlamaConfig& m = c.llama;
  const double H = double(m.hidden_size), Hd = double(m.head_dim()), tp = c.tp;
  const double nH = double(m.num_attention_heads) / tp, nKV = double(m.num_key_value_heads) / tp;
  const double I = double(m.intermediate_size) / tp, V = double(m.vocab_size) / tp;
  const FusedPieces fused = fused_pieces(c);
  // RMSNorm keeps x (in the accumulation dtype), 1/rms, the normalised x, and its output
  // (kept by the projections that read it); the fused kernel x, 1/rms and the output.
  // Sequence parallelism is counted as without it (memory_summary says so).
  const double norm = fused.on ? 2 * H * e + a : H * a + a + 2 * H * e;
  const std::string norm_text = fused.on ? "2(2H.e + a)" : "2(H.a + a + 2H.e)";
  // q, K and V repeated to nH heads, out; log-sum-exp. The hand-written flash attention:
  // q, k and v unrepeated, out and its copy for o_proj; log-sum-exp.
  const double attention = (fused.hand_flash ? (3 * nH + 2 * nKV) : 4 * nH) * Hd * e + nH * a;
  const std::string attention_text = fused.hand_flash ? "(3nH + 2nKV)/tp.Hd.e" : "4(nH/tp).Hd.e";
  PerToken t;
  if (m.is_moe()) t.moe = moe_per_token(c, e, a, &t.moe_formula);  // runtime/planner/memory_moe.h
  // gate, silu(gate), up, silu(gate)*up (fused: silu is not kept); or the experts
  const double mlp = m.is_moe() ? t.moe : (fused.on ? 3 : 4) * I * e;
  const std::string mlp_text = m.is_moe() ? "A_moe" : fused.on ? "3(I/tp).e" : "4(I/tp).e";
  t.layer_none = 2 * norm + attention + mlp;
  const Recompute mode = parse_recompute(c.recompute);
  std::ostringstream f;
  if (mode == Recompute::kNone) {
    t.layer = t.layer_none;
    f << norm_text << " + " << attention_text << " + (nH/tp).a + " << mlp_text;
  } else if (mode == Recompute::kSelective) {
    // norms keep their input and output (the fused kernel too: its 1/rms is recomputed); the
    // attention core keeps q, k, v (before the GQA repeat) and its output; SwiGLU keeps
    // gate and up, and the product the down projection reads. (A mixture of experts is
    // not recomputed: all of it stays.)
    t.layer = 2 * (2 * H * e) + (2 * nH + 2 * nKV) * Hd * e + (m.is_moe() ? t.moe : 3 * I * e);
    f << "2(2H.e) + (2nH + 2nKV)/tp.Hd.e + " << (m.is_moe() ? "A_moe" : "3(I/tp).e");
  } else {
    t.layer = H * e;  // the layer's input only
    f << "H.e (the layer's input)";
  }
  if (c.fp8 && mode != Recompute::kFull) {  // --fp8 (kernels/fp8.h): the projections save fp8 copies instead
    // Each projection keeps q4(x) [in] (1 B each: q, k, v, gate, up read H; o nH/tp.Hd; down
    // I/tp) and q4(W), its weight in 1 B per micro-batch, spread here over the T = B.S/cp
    // tokens. Without recompute the two norms' outputs and silu(gate)*up, which only the
    // projections kept, are no longer held: - (2H + I/tp).e.
    const double T = double(c.micro_batch_size) * double(c.seq_len) / c.cp;
    const double weights = (2 * nH + 2 * nKV) * Hd * H + 3 * I * H;  // this rank's q, k, v, o and gate, up, down
    const double copies = 5 * H + nH * Hd + I + weights / T;
    const double freed = mode == Recompute::kNone ? (2 * H + I) * e : 0;
    t.layer += copies - freed;
    f << " + fp8 copies (5H + (nH/tp).Hd + I/tp + W_layer/T) x 1" << (freed > 0 ? " - (2H + I/tp).e" : "");
  }
  t.layer_formula = f.str() + " = " + count_text(t.layer) + " B";
  if (fused.loss) {  // final norm's x and 1/rms, dh, int64 targets; dW [V, H] per micro-batch
    t.head = 2 * H * e + a + 8, t.head_fixed = V * H * e;
    t.head_formula = "2H.e + a + 8 = " + count_text(t.head) + " B per token (final norm's x and 1/rms, dh, targets), + dW " +
                     "V x H x e = " + count_text(t.head_fixed) + " B per micro-batch";
  } else {  // final norm, log-softmax output, int64 targets
    t.head = norm + V * a + 8;
    t.head_formula = std::string(fused.on ? "2H.e + a" : "H.a + a + 2H.e") + " + (V/tp).a + 8 = " + count_text(t.head) +
                     " B per token (final norm, log-softmax, targets)";
  }
  return t;
}

double fused_loss_peak(const TrainConfig& c, double T, double e, double a, std::string* formula) {
  const double H = double(c.llama.hidden_size), V = double(c.llama.vocab_size);
  const double rows = std::min(kLossChunkRows, T);  // c
  const double sum = V * H * a;                     // dW's fp32 sum [V, H]
  const double chunk = rows * (V * e + V * a + H * a + H * e);
  const double saved = V * H * e;  // dW in the compute dtype: counted in the activations, made after the loop
  if (formula)
    *formula = "V.H.a + c(V.e + V.a + H.a + H.e) - V.H.e, c = " + count_text(rows) + " rows: " + count_text(sum) + " + " + count_text(chunk) +
               " - " + count_text(saved) + " B (dW's fp32 sum; a chunk's logits, fp32 dlogits^T and h_c, dh rows)";
  return sum + chunk - saved;
}

}  // namespace picotron
