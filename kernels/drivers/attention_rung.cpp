// kernels/drivers/attention_rung.cpp — one rung of the attention ladder (kernels/README.md)
// run on its own against the reference: llm.c's dev/cuda drivers (`./attention_forward 1`)
// for this folder. Pick a rung, change its .cu, rebuild this one program, run it.
//
//   build/kernels/attention_rung N [--batch 2] [--heads 16] [--kv-heads 4] [--seq 1024]
//                                  [--head-dim 128] [--fp16] [--no-causal] [--iters 20]
//
//   N   the rung                 its files (kernels/)
//   0   naive: S x S in memory   attention_naive.cu
//   1   wmma: FlashAttention-2,  attention_wmma.cu, attention_wmma_backward.cu,
//       S, P, O in shared        attention_wmma.cuh
//   2   mma: FlashAttention-2,   attention_mma.cu, attention_mma_backward.cu, attention_mma.cuh,
//       S, P, O in registers     attention_mma_fragments.cuh
//   (every rung's launcher checks its inputs with attention_launch.cuh)
//
// Two steps, as llm.c's drivers:
//   1. validate: random q, k, v, dO (seed 0, bf16 or --fp16); rung N's cuda:: forward and
//      backward against reference::flash_attention_forward / _backward (plain ATen,
//      kernels/reference.cpp) on the same tensors: ||rung - ref|| / ||ref|| of out, lse, dq,
//      dk, dv, each against the tolerance tests/unit/test_kernels.cpp uses (bf16 2e-2, fp16 5e-3;
//      twice that for the gradients, whose P and dS are rounded to 16 bits; lse 1e-3);
//   2. benchmark: forward, and forward + backward, in ms and TFLOP/s, beside ATen's SDPA on
//      the same q and k, v repeated to nH heads (FLOPs: 4 B nH S^2 Hd forward, halved when
//      causal; the backward 2.5x that, as it recomputes S).
//
// Prints one line per check and per timing, then "rung N: ok" or "rung N: FAILED".
// Exit status: 0 every check within its tolerance; 1 one is not, or bad arguments; 2 no
// GPU, or a build without the CUDA kernels (PICOTRON_CUDA=OFF): one line that says so,
// nothing run (as bench/bench_kernels and scripts/gpu_check.sh). ctest runs each rung
// (`ctest -R attention_rung`), skipped (exit 2) where there is no GPU.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "kernels/kernels.h"

namespace K = picotron::kernels;

namespace {

using Forward = decltype(&K::cuda::flash_attention_forward);
using Backward = decltype(&K::cuda::flash_attention_backward);
struct Rung {
  const char* name;   // as --attention names it (kernels/README.md)
  const char* files;  // where to read it
  Forward forward;
  Backward backward;
};
// The ladder, slowest first: the index is N.
const Rung kRungs[] = {
    {"naive", "attention_naive.cu", K::cuda::attention_naive_forward, K::cuda::attention_naive_backward},
    {"wmma", "attention_wmma.cu, attention_wmma_backward.cu", K::cuda::flash_attention_forward,
     K::cuda::flash_attention_backward},
    {"mma", "attention_mma.cu, attention_mma_backward.cu", K::cuda::flash_attention_mma_forward,
     K::cuda::flash_attention_mma_backward},
};
constexpr int kNumRungs = sizeof(kRungs) / sizeof(kRungs[0]);

// ||a - b|| / ||b||, in fp64 (tests/unit/test_kernels.cpp's rel_diff).
double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  return (a64 - b64).norm().item<double>() / (b64.norm().item<double>() + 1e-30);
}

// Mean milliseconds of fn over `iters` calls after 3 warm-up calls, the device synchronised
// before and after (bench/bench_kernels.cpp's time_ms).
double time_ms(const std::function<void()>& fn, int iters) {
  for (int i = 0; i < 3; ++i) fn();
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("attention_rung", "one rung of the attention ladder against the reference, on one GPU");
  options.positional_help("N (0 naive, 1 wmma, 2 mma)");
  options.add_options()("rung", "N", cxxopts::value<int>())(
      "batch", "B", cxxopts::value<int64_t>()->default_value("2"))(
      "heads", "nH", cxxopts::value<int64_t>()->default_value("16"))(
      "kv-heads", "nKV (divides nH)", cxxopts::value<int64_t>()->default_value("4"))(
      "seq", "S", cxxopts::value<int64_t>()->default_value("1024"))(
      "head-dim", "Hd (64 or 128)", cxxopts::value<int64_t>()->default_value("128"))(
      "fp16", "fp16 instead of bf16")("no-causal", "attend to every key, not only the earlier ones")(
      "iters", "timed calls", cxxopts::value<int>()->default_value("20"))("h,help", "this help");
  options.parse_positional({"rung"});
  cxxopts::ParseResult args;
  try {
    args = options.parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_rung: %s (--help)\n", e.what());
    return 1;
  }
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  if (!args.count("rung") || args["rung"].as<int>() < 0 || args["rung"].as<int>() >= kNumRungs) {
    std::fprintf(stderr, "attention_rung: give the rung N: 0 naive, 1 wmma, 2 mma (--help)\n");
    return 1;
  }
  const int n = args["rung"].as<int>();
  const Rung& rung = kRungs[n];
  if (!K::fused_built()) {
    std::fprintf(stderr, "attention_rung: needs a GPU and a build with the CUDA kernels; this build has none "
                 "(PICOTRON_CUDA=OFF or no CUDA LibTorch): rung %d (%s) not run\n", n, rung.name);
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "attention_rung: needs a GPU; this machine has none: rung %d (%s) not run\n", n, rung.name);
    return 2;
  }
  const int64_t B = args["batch"].as<int64_t>(), nH = args["heads"].as<int64_t>(),
                nKV = args["kv-heads"].as<int64_t>(), S = args["seq"].as<int64_t>(),
                Hd = args["head-dim"].as<int64_t>();
  const bool causal = !args.count("no-causal"), fp16 = args.count("fp16") > 0;
  const int iters = args["iters"].as<int>();
  const auto dtype = fp16 ? torch::kHalf : torch::kBFloat16;
  const double tol = fp16 ? 5e-3 : 2e-2, scale = 1.0 / std::sqrt(double(Hd));
  std::printf("rung %d (%s: kernels/%s), B %lld nH %lld nKV %lld S %lld Hd %lld, %s, %s\n", n, rung.name, rung.files,
              (long long)B, (long long)nH, (long long)nKV, (long long)S, (long long)Hd, fp16 ? "fp16" : "bf16",
              causal ? "causal" : "not causal");

  // ---- 1. validate -----------------------------------------------------------------------
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  const auto q = torch::randn({B, nH, S, Hd}, opts);                                // [B, nH, S, Hd]
  const auto k = torch::randn({B, nKV, S, Hd}, opts), v = torch::randn_like(k);     // [B, nKV, S, Hd]
  const auto dout = torch::randn_like(q);                                           // [B, nH, S, Hd]
  bool ok = true;
  const auto check = [&](const char* what, const torch::Tensor& got, const torch::Tensor& want, double limit) {
    const double err = rel_err(got, want);
    const bool pass = err < limit;  // (a NaN fails)
    ok = ok && pass;
    std::printf("  %-4s rel err %.2e (tolerance %.0e)  %s\n", what, err, limit, pass ? "ok" : "FAILED");
  };
  try {
    at::Tensor out, lse, out_ref, lse_ref;  // (named here: a C++17 lambda cannot capture a structured binding)
    std::tie(out, lse) = rung.forward(q, k, v, scale, causal);  // [B, nH, S, Hd], [B, nH, S]
    std::tie(out_ref, lse_ref) = K::reference::flash_attention_forward(q, k, v, scale, causal);
    check("out", out, out_ref, tol);
    check("lse", lse, lse_ref, 1e-3);
    const auto [dq, dk, dv] = rung.backward(dout, q, k, v, out, lse, scale, causal);
    const auto [dq_ref, dk_ref, dv_ref] =
        K::reference::flash_attention_backward(dout, q, k, v, out_ref, lse_ref, scale, causal);
    check("dq", dq, dq_ref, 2 * tol);
    check("dk", dk, dk_ref, 2 * tol);
    check("dv", dv, dv_ref, 2 * tol);

    // ---- 2. benchmark ----------------------------------------------------------------------
    const double fwd_flops = 4.0 * B * nH * S * S * Hd / (causal ? 2 : 1);
    const auto k_all = k.repeat_interleave(nH / nKV, /*dim=*/1), v_all = v.repeat_interleave(nH / nKV, /*dim=*/1);
    const auto sdpa = [&] { at::scaled_dot_product_attention(q, k_all, v_all, {}, 0.0, causal); };
    const auto sdpa_both = [&] {
      auto ql = q.detach().requires_grad_(), kl = k_all.detach().requires_grad_(), vl = v_all.detach().requires_grad_();
      at::scaled_dot_product_attention(ql, kl, vl, {}, 0.0, causal).backward(dout);
    };
    const auto fwd = [&] { rung.forward(q, k, v, scale, causal); };
    const auto both = [&] {
      rung.forward(q, k, v, scale, causal);
      rung.backward(dout, q, k, v, out, lse, scale, causal);
    };
    const auto line = [&](const char* what, double flops, double ms, double sdpa_ms) {
      std::printf("  %-12s %9.3f ms %7.1f TFLOP/s    sdpa %9.3f ms %7.1f TFLOP/s    %.2fx sdpa\n", what, ms,
                  flops / (ms * 1e-3) / 1e12, sdpa_ms, flops / (sdpa_ms * 1e-3) / 1e12, sdpa_ms / ms);
    };
    line("forward", fwd_flops, time_ms(fwd, iters), time_ms(sdpa, iters));
    line("fwd + bwd", 3.5 * fwd_flops, time_ms(both, iters), time_ms(sdpa_both, iters));
  } catch (const c10::Error& e) {  // a check of the launcher (TORCH_CHECK), or a CUDA error
    std::printf("  the rung threw: %s\n", e.what_without_backtrace());
    ok = false;
  }
  std::printf("rung %d: %s\n", n, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
