// The estimator (runtime/planner/memory_estimate.h) against peaks measured on a GPU, where
// the CPU runs of tests/scripts/check_memory_estimate.sh cannot go: --kernels fused needs CUDA. Pure
// arithmetic: nothing allocated.
//
// Test: build/tests/unit_tests "[memory_estimate]"
#include <cmath>

#include <catch2/catch.hpp>

#include "kernels/kernels.h"
#include "runtime/cli/train_config.h"
#include "runtime/planner/memory_estimate.h"
#include "runtime/planner/memory_per_token.h"

using namespace picotron;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// `build/train --device cuda --dtype bf16 --model smollm-1.7b --micro-batch-size 4
// --seq-len 2048 --kernels <kernels>` on one GPU.
TrainConfig smollm_1_7b(const std::string& kernels) {
  TrainConfig c;
  c.model = "smollm-1.7b";
  c.llama = preset(c.model);
  c.device = "cuda";
  c.dtype = Precision::kBF16, c.dtype_given = true;
  c.micro_batch_size = 4;
  c.seq_len = 2048;
  c.kernels = kernels;
  return c;
}

MemoryEstimate estimate(const TrainConfig& c) {
  return estimate_memory(c, MeshCoords{0, 0, 0, 0}, replicated_plan(c.llama));
}

double relative_error(double estimate, double measured) { return std::abs(estimate - measured) / measured; }

}  // namespace

// Measured on an H100 80GB with torch 2.11.0+cu130: `build/train --device cuda --dtype bf16
// --model smollm-1.7b --micro-batch-size 4 --seq-len 2048 --kernels aten|fused`, the peak
// allocated by the caching allocator: aten 54.4 GiB, fused 45.4 GiB (attention through SDPA,
// --kernels fused's default), fused with the hand-written flash attention 46.2 GiB.
TEST_CASE("memory_estimate: smollm-1.7b B=4 S=2048 bf16, --kernels aten and fused, as measured on an H100",
          "[memory_estimate]") {
  const double aten = estimate(smollm_1_7b("aten")).peak_bytes() / kGiB;
  const double fused = estimate(smollm_1_7b("fused")).peak_bytes() / kGiB;
  TrainConfig hand = smollm_1_7b("fused");
  hand.attention = "flash-wmma";
  const double flash = estimate(hand).peak_bytes() / kGiB;
  INFO("aten " << aten << " GiB, fused " << fused << " GiB, fused + flash-wmma " << flash << " GiB");
  CHECK(relative_error(aten, 54.4) < 0.01);    // 54.34
  CHECK(relative_error(fused, 45.4) < 0.03);   // 45.32
  CHECK(relative_error(flash, 46.2) < 0.03);   // 46.07
  // What changes is what the activations keep and the loss's peak; the state is the same.
  CHECK(estimate(smollm_1_7b("fused")).state_bytes() == estimate(smollm_1_7b("aten")).state_bytes());
  CHECK(estimate(smollm_1_7b("fused")).transient.name == "forward peak (fused loss, a chunk)");
  CHECK(estimate(smollm_1_7b("aten")).transient.name == "backward peak (at the loss)");
}

TEST_CASE("memory_estimate: --kernels fused per token: the norms, SwiGLU and the loss keep less", "[memory_estimate]") {
  // smollm-1.7b: H 2048, I 8192, nH 32, Hd 64, V 49152; bf16: e = 2, a = 4.
  const double H = 2048, I = 8192, V = 49152, e = 2, a = 4;
  const PerToken aten = per_token(smollm_1_7b("aten"), e, a), fused = per_token(smollm_1_7b("fused"), e, a);
  CHECK(aten.layer - fused.layer == 2 * H * a + I * e);  // two fp32 copies of x, silu(gate)
  CHECK(fused.head == 2 * H * e + a + 8);                // final norm's x, 1/rms; dh; targets
  CHECK(fused.head_fixed == V * H * e);                  // dW, per micro-batch
  CHECK(aten.head_fixed == 0);
  // Under tp the vocabulary-parallel loss stays (its log-softmax), the final norm is fused.
  TrainConfig tp2 = smollm_1_7b("fused");
  tp2.tp = 2;
  CHECK_FALSE(fused_pieces(tp2).loss);
  CHECK(per_token(tp2, e, a).head == 2 * H * e + a + V / 2 * a + 8);
  // Ring attention (cp) keeps its own core: the hand-written flash attention does not replace it.
  TrainConfig cp2 = smollm_1_7b("fused");
  cp2.attention = "flash-mma", cp2.cp = 2;
  CHECK_FALSE(fused_pieces(cp2).hand_flash);
  cp2.cp = 1;
  CHECK(fused_pieces(cp2).hand_flash);
}

TEST_CASE("memory_estimate: --kernels auto counts what train.cpp runs", "[memory_estimate]") {
  TrainConfig c = smollm_1_7b("auto");
  CHECK(fused_pieces(c).on == kernels::kVerifiedOnGpu);  // fused on CUDA once verified on a GPU
  c.device = "cpu";
  CHECK_FALSE(fused_pieces(c).on);
  c.device = "cuda", c.dtype = Precision::kFP64;
  CHECK_FALSE(fused_pieces(c).on);
}

TEST_CASE("memory_estimate: --fp8 per token: fp8 copies saved, the bf16 inputs the projections held freed",
          "[memory_estimate][fp8]") {
  // smollm-1.7b: H 2048, I 8192, nH 32 (nKV 32), Hd 64; bf16 e = 2; B 4, S 2048 -> T 8192.
  const double H = 2048, I = 8192, e = 2, a = 4, T = 4 * 2048;
  TrainConfig c = smollm_1_7b("aten");
  const PerToken bf16 = per_token(c, e, a);
  c.fp8 = true;
  const PerToken fp8 = per_token(c, e, a);
  const double weights = 4 * H * H + 3 * I * H;  // q, k, v, o (nKV = nH) and gate, up, down
  CHECK(fp8.layer - bf16.layer == Approx(5 * H + H + I + weights / T - (2 * H + I) * e));
  CHECK(fp8.layer_formula.find("fp8 copies") != std::string::npos);
  // Full recompute keeps only the layer's input: fp8 changes nothing there.
  c.recompute = "full";
  TrainConfig plain = c;
  plain.fp8 = false;
  CHECK(per_token(c, e, a).layer == per_token(plain, e, a).layer);
}
