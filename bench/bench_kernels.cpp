// bench/bench_kernels.cpp — each fused kernel against its ATen path on one GPU: time,
// achieved bandwidth (memory-bound kernels) or TFLOP/s (attention), and the ratio.
//
//   ceiling   the device's measured copy bandwidth: a 1 GiB device-to-device copy
//             reads and writes 2 GiB; memory-bound kernels aim at >= 80% of it
//   GB/s      = the bytes a kernel must move at least (its inputs read once, its
//               outputs written once) / its time: the same count for both columns, so
//               the ATen column shows how far the unfused chain is from that minimum
//   TFLOP/s   attention, causal: 4 B nH S^2 Hd / 2 forward, 2.5x that backward;
//             the reference column is torch's scaled_dot_product_attention (flash
//             backend in bf16), forward + backward; one row per rung of the ladder
//             (kernels/README.md) and head dim; the mma rung's target is >= 70% of SDPA
//   memory    fused linear + cross-entropy against logits + F::cross_entropy at
//             V = 128256: peak bytes allocated, target >= 4x less
//
// Run:  build/bench/bench_kernels [--tokens 16384] [--hidden 2048] [--iters 20]
// Without a CUDA device it prints that and exits 2 (nothing to measure on the CPU).
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "kernels/kernels.h"
#include "picotron/format.h"
#include "runtime/observe/measure.h"

using namespace picotron;
namespace K = picotron::kernels;
namespace F = torch::nn::functional;

namespace {

// Mean milliseconds of fn over `iters` back-to-back calls after 3 warm-up calls (the
// device synchronised before and after: the wall time is the GPU time).
double time_ms(const std::function<void()>& fn, int iters) {
  for (int i = 0; i < 3; ++i) fn();
  torch::cuda::synchronize();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
}

void row(const char* name, double bytes_or_flops, bool flops, double fused_ms, double aten_ms, double ceiling_gbs) {
  const double fused_rate = bytes_or_flops / (fused_ms * 1e-3) / (flops ? 1e12 : 1e9);
  const double aten_rate = bytes_or_flops / (aten_ms * 1e-3) / (flops ? 1e12 : 1e9);
  std::printf("%-34s %9.3f ms %9.3f ms %8.1f %8.1f %-7s %6.2fx", name, fused_ms, aten_ms, fused_rate, aten_rate,
              flops ? "TFLOP/s" : "GB/s", aten_ms / fused_ms);
  if (!flops) std::printf("   %5.1f%% of copy", 100.0 * fused_rate / ceiling_gbs);
  std::printf("\n");
  std::fflush(stdout);  // each row reaches the log even if a later block aborts
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_kernels", "fused kernels against their ATen paths on one GPU");
  options.add_options()("tokens", "rows N (B x S) for the row kernels", cxxopts::value<int64_t>()->default_value("16384"))(
      "hidden", "H", cxxopts::value<int64_t>()->default_value("2048"))(
      "iters", "timed calls per kernel", cxxopts::value<int>()->default_value("20"))("h,help", "this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also into a pipe or a log
  if (!torch::cuda::is_available() || !K::fused_built()) {
    std::fprintf(stderr, "bench_kernels: no CUDA device (or a build without the CUDA kernels): nothing to measure\n");
    return 2;
  }
  const int64_t n = args["tokens"].as<int64_t>(), h = args["hidden"].as<int64_t>(), inter = 4 * h;
  const int iters = args["iters"].as<int>();
  torch::NoGradGuard no_grad;
  const auto bf16 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto f32 = bf16.dtype(torch::kFloat32);

  // The ceiling: a device-to-device copy of 1 GiB (2 GiB moved).
  auto src = torch::empty({int64_t(1) << 28}, f32), dst = torch::empty_like(src);
  const double copy_ms = time_ms([&] { dst.copy_(src); }, iters);
  const double ceiling = 2.0 * src.nbytes() / (copy_ms * 1e-3) / 1e9;
  std::printf("device copy bandwidth: %.0f GB/s (1 GiB device-to-device)\n\n", ceiling);
  std::printf("%-34s %12s %12s %8s %8s %-7s %7s\n", "kernel (bf16)", "fused", "aten", "fused", "aten", "", "speedup");

  {  // RMSNorm forward: read x and w, write y (2 bytes each)
    auto x = torch::randn({n, h}, bf16), w = torch::randn({h}, bf16);
    auto aten = [&] {
      auto xf = x.to(torch::kFloat32);
      return w * (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-5)).to(torch::kBFloat16);
    };
    row("rmsnorm forward [N, H]", 2.0 * 2 * n * h, false, time_ms([&] { K::cuda::rms_norm_forward(x, w, 1e-5); }, iters),
        time_ms(aten, iters), ceiling);
    auto [y, r] = K::cuda::rms_norm_forward(x, w, 1e-5);
    auto dy = torch::randn_like(x);
    row("rmsnorm backward", 3.0 * 2 * n * h, false, time_ms([&] { K::cuda::rms_norm_backward(dy, x, w, r); }, iters),
        time_ms([&] { K::reference::rms_norm_backward(dy, x, w, r); }, iters), ceiling);
  }
  {  // RoPE on q and k: read and write both once
    const int64_t hd = 64, nh = h / hd, nkv = std::max<int64_t>(1, nh / 4), s = 2048, b = std::max<int64_t>(1, n / s);
    auto q = torch::randn({b, s, nh, hd}, bf16), k = torch::randn({b, s, nkv, hd}, bf16);
    auto cos = torch::randn({s, hd}, bf16), sin = torch::randn({s, hd}, bf16);
    row("rope q+k [B, S, n, Hd]", 2.0 * 2 * (q.numel() + k.numel()), false,
        time_ms([&] { K::cuda::rope(q, k, cos, sin, false); }, iters),
        time_ms([&] { K::reference::rope(q, k, cos, sin, false); }, iters), ceiling);
  }
  {  // SwiGLU: read gate and up, write y
    auto g = torch::randn({n, inter}, bf16), u = torch::randn({n, inter}, bf16), dy = torch::randn_like(g);
    row("swiglu forward [N, I]", 3.0 * 2 * g.numel(), false, time_ms([&] { K::cuda::swiglu_forward(g, u); }, iters),
        time_ms([&] { return F::silu(g) * u; }, iters), ceiling);
    row("swiglu backward", 5.0 * 2 * g.numel(), false, time_ms([&] { K::cuda::swiglu_backward(dy, g, u); }, iters),
        time_ms([&] { K::reference::swiglu_backward(dy, g, u); }, iters), ceiling);
  }
  {  // cross-entropy, loss and dlogits: read the logits, write dlogits
    const int64_t rows = std::min<int64_t>(n, 4096), v = 128256;
    auto z = torch::randn({rows, v}, bf16);
    auto t = torch::randint(0, v, {rows}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kInt64));
    auto aten = [&] {
      torch::AutoGradMode grad(true);
      auto zz = z.detach().requires_grad_(true);
      F::cross_entropy(zz.to(torch::kFloat32), t).backward();
    };
    row("cross-entropy + dlogits [N, V]", 2.0 * 2 * z.numel(), false,
        time_ms([&] { K::cuda::cross_entropy_forward(z, t, 1.0 / rows, false); }, iters), time_ms(aten, iters),
        ceiling);
  }
  {  // AdamW over a 360M-parameter model's worth of tensors: read g, m, v, w; write m, v, w, p(bf16)
    std::vector<torch::Tensor> p, w, g, m, v;
    std::vector<bool> decay;
    for (int i = 0; i < 32; ++i) {
      w.push_back(torch::randn({11'250'000}, f32));
      p.push_back(w.back().to(torch::kBFloat16));
      g.push_back(torch::randn_like(w.back()));
      m.push_back(torch::zeros_like(w.back()));
      v.push_back(torch::zeros_like(w.back()));
      decay.push_back(i % 4 != 0);
    }
    const int64_t elems = 32 * 11'250'000;
    K::AdamWHyper hp;
    hp.lr = 1e-4;
    row("adamw, 360M params (multi-tensor)", double(elems) * (4 * 4 + 3 * 4 + 2), false,
        time_ms([&] { K::cuda::adamw_step(p, w, g, m, v, decay, hp); }, iters),
        time_ms([&] { K::reference::adamw_step(p, w, g, m, v, decay, hp); }, iters), ceiling);
  }
  {  // fused linear + cross-entropy: peak memory at V = 128256
    const int64_t rows = std::min<int64_t>(n, 8192), v = 128256;
    torch::AutoGradMode grad(true);
    auto hid = torch::randn({rows, h}, bf16).requires_grad_(true);
    auto wt = (torch::randn({v, h}, bf16) * 0.02).requires_grad_(true);
    auto t = torch::randint(0, v, {rows}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kInt64));
    const torch::Device dev = hid.device();  // cuda:0 (a bare kCUDA has index -1, which the statistics refuse)
    auto peak_of = [&](const std::function<void()>& fn) {
      torch::cuda::synchronize();
      const int64_t before = current_memory_bytes(dev);
      reset_peak_memory(dev);
      fn();
      torch::cuda::synchronize();
      return double(peak_memory_bytes(dev) - before);
    };
    const double plain = peak_of([&] { F::cross_entropy(torch::matmul(hid, wt.t()).to(torch::kFloat32), t).backward(); });
    const double fused = peak_of([&] { K::linear_cross_entropy(hid, wt, t).backward(); });
    std::printf("\nlinear + cross-entropy, N %lld, H %lld, V %lld: peak %s plain, %s fused (%.1fx less)\n",
                (long long)rows, (long long)h, (long long)v, human_bytes(plain).c_str(), human_bytes(fused).c_str(),
                plain / fused);
    std::printf("\n%-34s %12s %12s %8s %8s %-7s %7s\n", "attention (bf16, causal, S 2048)", "rung", "sdpa", "rung",
                "sdpa", "", "x sdpa");
  }
  // Flash attention, last (a rung that fails takes only the rows after it): the ladder's
  // rungs (rung 0, naive: the S x S scores in global memory, 2 GiB here) against torch's SDPA (flash backend), causal, S 2048, forward alone and forward +
  // backward; B x nH x Hd = 4 x 2048 at each head dim.
  for (const int64_t hd : {int64_t(64), int64_t(128)}) {
    const int64_t b = 4, s = 2048, nh = 2048 / hd;
    auto q = torch::randn({b, nh, s, hd}, bf16), k = torch::randn_like(q), v = torch::randn_like(q);
    const double fwd_flops = 4.0 * b * nh * s * s * hd / 2;  // QK^T and PV, causal half
    const auto sdpa_fwd = [&] { at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true); };
    const double sdpa_fwd_ms = time_ms(sdpa_fwd, iters);
    torch::AutoGradMode grad(true);
    auto ql = q.detach().requires_grad_(true), kl = k.detach().requires_grad_(true), vl = v.detach().requires_grad_(true);
    auto sdpa = [&] { at::scaled_dot_product_attention(ql, kl, vl, {}, 0.0, /*is_causal=*/true).sum().backward(); };
    const double sdpa_ms = time_ms(sdpa, iters);
    for (const auto& [rung, label] : {std::pair{K::FlashRung::kNaive, "naive"}, std::pair{K::FlashRung::kWmma, "wmma"},
                                      std::pair{K::FlashRung::kMma, "mma"}}) {
      const std::string hdl = " (" + std::string(label) + ", Hd " + std::to_string(hd) + ")";
      auto fwd = [&] { K::flash_attention(q, k, v, rung); };
      auto both = [&] { std::get<0>(K::flash_attention(ql, kl, vl, rung)).sum().backward(); };
      row(("flash fwd" + hdl).c_str(), fwd_flops, true, time_ms(fwd, iters), sdpa_fwd_ms, ceiling);
      row(("flash fwd+bwd" + hdl).c_str(), fwd_flops * 3.5, true, time_ms(both, iters), sdpa_ms, ceiling);  // bwd 2.5x
    }
  }
  return 0;
}
