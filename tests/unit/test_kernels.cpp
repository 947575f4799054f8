// Tests of kernels/: the ATen references and the autograd wiring on the CPU (fp64: every
// difference is rounding, so 1e-10 relative), and every CUDA kernel against its
// reference over a table of shapes and dtypes on a GPU (skipped without one).
//
// Tolerances (relative, in the norm of the difference over the norm of the reference):
//   fp64 CPU 1e-10 (rounding of different but equal formulas); fp32 GPU 1e-5 (fp32
//   rounding over sums of up to V terms); bf16 2e-2 and fp16 5e-3 (one rounding of the
//   output, 2^-8 and 2^-11, plus inputs rounded inside the kernel's tiles).
//
// Run: build/tests/unit_tests "[kernels]"
#include <catch2/catch.hpp>

#include "kernels/kernels.h"
#include "picotron/init.h"
#include "picotron/model.h"
#include "picotron/optim.h"

using namespace picotron;
namespace K = picotron::kernels;
namespace F = torch::nn::functional;

namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a64 = a.detach().to(torch::kCPU, torch::kFloat64), b64 = b.detach().to(torch::kCPU, torch::kFloat64);
  return (a64 - b64).norm().item<double>() / (b64.norm().item<double>() + 1e-30);
}

// d/dinputs of sum(out * probe) by autograd: the gradients a backward must reproduce.
std::vector<torch::Tensor> grads_of(const torch::Tensor& out, const torch::Tensor& probe,
                                    const std::vector<torch::Tensor>& inputs) {
  return torch::autograd::grad({(out * probe).sum()}, inputs);
}

torch::Tensor leaf(torch::Tensor t) { return t.detach().requires_grad_(true); }

}  // namespace

// ---- the references against the model's ATen ops and autograd (fp64, CPU) ----------

TEST_CASE("kernels: RMSNorm reference = the model's RMSNorm, forward and backward", "[kernels]") {
  auto x = leaf(torch::randn({3, 5, 24}, kF64)), w = leaf(torch::randn({24}, kF64));
  RMSNorm norm(24, 1e-5, kF64);
  { torch::NoGradGuard g; norm->weight.copy_(w); }
  auto y = norm->forward(x);
  auto probe = torch::randn_like(y);
  auto want = grads_of(y, probe, {x, norm->weight});
  auto [y_ref, inv_rms] = K::reference::rms_norm_forward(x.detach(), w.detach(), 1e-5);
  CHECK(rel_diff(y_ref, y) < 1e-12);
  auto [dx, dw] = K::reference::rms_norm_backward(probe, x.detach(), w.detach(), inv_rms);
  CHECK(rel_diff(dx, want[0]) < 1e-10);
  CHECK(rel_diff(dw, want[1]) < 1e-10);
  // The autograd op (the reference pair on the CPU) gives the same gradients.
  auto y_op = K::rms_norm(x, w, 1e-5);
  auto got = grads_of(y_op, probe, {x, w});
  CHECK(rel_diff(got[0], want[0]) < 1e-10);
  CHECK(rel_diff(got[1], want[1]) < 1e-10);
}

TEST_CASE("kernels: RoPE reference = apply_rope, and its inverse is the backward", "[kernels]") {
  const int64_t b = 2, s = 7, nh = 4, nkv = 2, hd = 16;
  auto q = leaf(torch::randn({b, s, nh, hd}, kF64)), k = leaf(torch::randn({b, s, nkv, hd}, kF64));
  const auto tables = rope_tables(hd, 10000.0, torch::arange(s), torch::kFloat64, torch::kCPU);
  auto q_model = apply_rope(q.transpose(1, 2), tables).transpose(1, 2);  // [B, S, nH, Hd]
  auto k_model = apply_rope(k.transpose(1, 2), tables).transpose(1, 2);
  auto [q_ref, k_ref] = K::reference::rope(q.detach(), k.detach(), tables.cos, tables.sin, false);
  CHECK(rel_diff(q_ref, q_model) < 1e-12);
  CHECK(rel_diff(k_ref, k_model) < 1e-12);
  auto pq = torch::randn_like(q_ref), pk = torch::randn_like(k_ref);
  auto want = torch::autograd::grad({(q_model * pq).sum() + (k_model * pk).sum()}, {q, k});
  auto [dq, dk] = K::reference::rope(pq, pk, tables.cos, tables.sin, /*inverse=*/true);
  CHECK(rel_diff(dq, want[0]) < 1e-10);
  CHECK(rel_diff(dk, want[1]) < 1e-10);
  auto [q_op, k_op] = K::rope(q, k, tables.cos, tables.sin);
  auto got = torch::autograd::grad({(q_op * pq).sum() + (k_op * pk).sum()}, {q, k});
  CHECK(rel_diff(got[0], want[0]) < 1e-10);
  CHECK(rel_diff(got[1], want[1]) < 1e-10);
}

TEST_CASE("kernels: SwiGLU reference = silu(gate) * up, forward and backward", "[kernels]") {
  auto gate = leaf(torch::randn({5, 37}, kF64) * 3), up = leaf(torch::randn({5, 37}, kF64));
  auto y = F::silu(gate) * up;
  auto probe = torch::randn_like(y);
  auto want = grads_of(y, probe, {gate, up});
  CHECK(rel_diff(K::reference::swiglu_forward(gate.detach(), up.detach()), y) < 1e-12);
  auto [dg, du] = K::reference::swiglu_backward(probe, gate.detach(), up.detach());
  CHECK(rel_diff(dg, want[0]) < 1e-10);
  CHECK(rel_diff(du, want[1]) < 1e-10);
  auto got = grads_of(K::swiglu(gate, up), probe, {gate, up});
  CHECK(rel_diff(got[0], want[0]) < 1e-10);
  CHECK(rel_diff(got[1], want[1]) < 1e-10);
}

TEST_CASE("kernels: cross-entropy reference and the fused linear + cross-entropy = F::cross_entropy", "[kernels]") {
  const int64_t n = 11, h = 8, v = 29;
  auto hidden = leaf(torch::randn({n, h}, kF64)), weight = leaf(torch::randn({v, h}, kF64));
  auto targets = torch::randint(0, v, {n}, torch::kInt64);
  targets[3] = -100;  // ignored, as F::cross_entropy's default ignore_index
  auto logits = torch::matmul(hidden, weight.t());
  auto loss = F::cross_entropy(logits, targets);
  auto want = torch::autograd::grad({loss}, {hidden, weight});
  auto [losses, dlogits] = K::reference::cross_entropy_forward(logits.detach(), targets, 1.0 / (n - 1), false);
  CHECK(losses[3].item<double>() == 0.0);
  CHECK(losses.sum().item<double>() / (n - 1) == Approx(loss.item<double>()).epsilon(1e-6));  // fp32 losses
  auto z = leaf(logits.detach());
  auto dz_want = torch::autograd::grad({F::cross_entropy(z, targets)}, {z})[0];
  CHECK(rel_diff(dlogits, dz_want) < 1e-10);
  // The autograd op, and the fused linear + CE in chunks of 3 rows (4 chunks, the last short).
  auto z2 = leaf(logits.detach());
  auto ce = K::cross_entropy(z2, targets);
  CHECK(ce.item<double>() == Approx(loss.item<double>()).epsilon(1e-6));
  auto got_z = torch::autograd::grad({ce * 2.0}, {z2})[0];  // a non-unit upstream gradient
  CHECK(rel_diff(got_z, dz_want * 2.0) < 1e-10);
  auto fused_loss = K::linear_cross_entropy(hidden, weight, targets, /*chunk_rows=*/3);
  CHECK(fused_loss.item<double>() == Approx(loss.item<double>()).epsilon(1e-6));
  auto got = torch::autograd::grad({fused_loss * 2.0}, {hidden, weight});  // a non-unit upstream gradient
  CHECK(rel_diff(got[0], want[0] * 2.0) < 1e-10);
  CHECK(rel_diff(got[1], want[1] * 2.0) < 1e-6);  // dW summed in fp32 over the chunks
}

TEST_CASE("kernels: attention reference = causal_attention (GQA), out, lse and gradients", "[kernels]") {
  const int64_t b = 2, nh = 4, nkv = 2, s = 9, hd = 8;
  auto q = leaf(torch::randn({b, nh, s, hd}, kF64)), k = leaf(torch::randn({b, nkv, s, hd}, kF64)),
       v = leaf(torch::randn({b, nkv, s, hd}, kF64));
  auto out = causal_attention(q, k, v);
  auto probe = torch::randn_like(out);
  auto want = grads_of(out, probe, {q, k, v});
  const double scale = 1.0 / std::sqrt(double(hd));
  auto [o_ref, lse] = K::reference::flash_attention_forward(q.detach(), k.detach(), v.detach(), scale, true);
  CHECK(rel_diff(o_ref, out) < 1e-10);
  // lse of row i: log sum_{j <= i} exp(scale q_i . k_j), kv head h / (nH / nKV).
  auto row = (q[1][3][5] * k[1][1].narrow(0, 0, 6)).sum(-1) * scale;
  CHECK(lse[1][3][5].item<double>() == Approx(torch::logsumexp(row, 0).item<double>()).epsilon(1e-6));
  auto [dq, dk, dv] = K::reference::flash_attention_backward(probe, q.detach(), k.detach(), v.detach(), o_ref, lse,
                                                             scale, true);
  CHECK(rel_diff(dq, want[0]) < 1e-10);
  CHECK(rel_diff(dk, want[1]) < 1e-10);
  CHECK(rel_diff(dv, want[2]) < 1e-10);
  for (const auto rung : {K::FlashRung::kNaive, K::FlashRung::kWmma, K::FlashRung::kMma}) {  // on the CPU each rung runs the reference
    auto got = grads_of(std::get<0>(K::flash_attention(q, k, v, rung)), probe, {q, k, v});
    for (int i = 0; i < 3; ++i) CHECK(rel_diff(got[i], want[i]) < 1e-10);
  }
}

TEST_CASE("kernels: the multi-tensor AdamW reference = AdamW::step", "[kernels]") {
  auto make = [](bool fused) {
    torch::manual_seed(3);
    std::vector<std::pair<std::string, torch::Tensor>> named = {
        {"model.layers.0.mlp.up_proj.weight", torch::randn({6, 5}).requires_grad_(true)},
        {"model.norm.weight", torch::ones({5}).requires_grad_(true)}};
    AdamWOptions o;
    if (fused) K::use_fused_adamw(o);
    return std::make_pair(named, std::make_unique<AdamW>(named, o));
  };
  auto [named_a, aten] = make(false);
  auto [named_f, fused] = make(true);
  for (int step = 0; step < 3; ++step) {
    for (auto* opt : {aten.get(), fused.get()}) {
      opt->zero_main_grads();
      torch::manual_seed(100 + step);
      for (auto& p : opt->params()) p.main_grad.copy_(torch::randn_like(p.main_grad));
      opt->step(/*lr=*/1e-2, /*grad_scale=*/0.5);
    }
  }
  for (size_t i = 0; i < named_a.size(); ++i) CHECK(rel_diff(named_f[i].second, named_a[i].second) < 1e-6);
}

TEST_CASE("kernels: a model with --kernels fused (references on the CPU) = the ATen model", "[kernels]") {
  // Each --attention; in fp64 the hand-written rungs (bf16/fp16 only) give way to SDPA,
  // and the summary says so. (The rungs' autograd wiring: the attention case above.)
  const auto attention = GENERATE(K::Attention::kSdpa, K::Attention::kNaive, K::Attention::kFlashWmma, K::Attention::kFlashMma);
  LlamaConfig c = preset("tiny");
  c.num_hidden_layers = 2;
  LlamaForCausalLM plain(c), fused(c);
  plain->to(torch::kFloat64);
  fused->to(torch::kFloat64);
  init_parameters(*plain, 5, 0.02);
  init_parameters(*fused, 5, 0.02);
  const std::string summary = K::use_fused_kernels(*fused, torch::kFloat64, attention);
  INFO(summary);
  CHECK(summary.find("linear + cross-entropy") != std::string::npos);
  CHECK(summary.find("attention through SDPA") != std::string::npos);  // fp64: the rungs take bf16/fp16 only
  auto tokens = torch::randint(0, c.vocab_size, {2, 16}), targets = torch::randint(0, c.vocab_size, {2, 16});
  auto l_plain = plain->loss(tokens, targets), l_fused = fused->loss(tokens, targets);
  CHECK(l_fused.item<double>() == Approx(l_plain.item<double>()).epsilon(1e-6));  // per-row losses in fp32
  l_plain.backward();
  l_fused.backward();
  auto fused_params = fused->named_parameters();
  for (auto& p : plain->named_parameters()) {
    INFO(p.key());
    CHECK(rel_diff(fused_params[p.key()].grad(), p.value().grad()) < 1e-6);
  }
}

// ---- the CUDA kernels against the references (a GPU; skipped without one) -----------

namespace {
bool have_gpu() {
  if (torch::cuda::is_available() && K::fused_built()) return true;
  WARN("SKIPPED: no CUDA device (or a build without the CUDA kernels)");
  return false;
}
double tolerance(torch::ScalarType t) { return t == torch::kFloat32 ? 1e-5 : t == torch::kHalf ? 5e-3 : 2e-2; }
const std::vector<torch::ScalarType> kDtypes = {torch::kFloat32, torch::kBFloat16, torch::kHalf};
torch::TensorOptions on_gpu(torch::ScalarType t) { return torch::TensorOptions().device(torch::kCUDA).dtype(t); }
}  // namespace

TEST_CASE("kernels on the GPU: RMSNorm, RoPE, SwiGLU = their references", "[kernels][gpu]") {
  if (!have_gpu()) return;
  for (auto dt : kDtypes)
    for (auto [n, h] : {std::pair<int64_t, int64_t>{1, 8}, {7, 1000}, {128, 576}, {33, 2049}, {4096, 4096}}) {
      INFO("RMSNorm " << c10::toString(dt) << " N " << n << " H " << h);
      auto x = torch::randn({n, h}, on_gpu(dt)), w = torch::randn({h}, on_gpu(dt)), dy = torch::randn_like(x);
      auto [y, r] = K::cuda::rms_norm_forward(x, w, 1e-5);
      auto [y_ref, r_ref] = K::reference::rms_norm_forward(x, w, 1e-5);
      CHECK(rel_diff(y, y_ref) < tolerance(dt));
      auto [dx, dw] = K::cuda::rms_norm_backward(dy, x, w, r);
      auto [dx_ref, dw_ref] = K::reference::rms_norm_backward(dy, x, w, r_ref);
      CHECK(rel_diff(dx, dx_ref) < tolerance(dt));
      CHECK(rel_diff(dw, dw_ref) < tolerance(dt));
    }
  for (auto dt : kDtypes)
    for (auto [s, nh, nkv, hd] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{5, 3, 1, 8}, {100, 9, 3, 64},
                                  {2048, 32, 8, 128}}) {
      INFO("RoPE " << c10::toString(dt) << " S " << s << " nH " << nh << " Hd " << hd);
      auto q = torch::randn({2, s, nh, hd}, on_gpu(dt)), k = torch::randn({2, s, nkv, hd}, on_gpu(dt));
      auto t = rope_tables(hd, 10000.0, torch::arange(s), dt, torch::kCUDA);
      for (bool inverse : {false, true}) {
        auto [q1, k1] = K::cuda::rope(q, k, t.cos, t.sin, inverse);
        auto [q2, k2] = K::reference::rope(q, k, t.cos, t.sin, inverse);
        CHECK(rel_diff(q1, q2) < tolerance(dt));
        CHECK(rel_diff(k1, k2) < tolerance(dt));
      }
    }
  for (auto dt : kDtypes)
    for (int64_t numel : {1, 7, 1000, 65537, 3 * 1536 * 2048 + 5}) {
      INFO("SwiGLU " << c10::toString(dt) << " numel " << numel);
      auto g = torch::randn({numel}, on_gpu(dt)) * 3, u = torch::randn({numel}, on_gpu(dt)), dy = torch::randn_like(g);
      CHECK(rel_diff(K::cuda::swiglu_forward(g, u), K::reference::swiglu_forward(g, u)) < tolerance(dt));
      auto [dg, du] = K::cuda::swiglu_backward(dy, g, u);
      auto [dg_ref, du_ref] = K::reference::swiglu_backward(dy, g, u);
      CHECK(rel_diff(dg, dg_ref) < tolerance(dt));
      CHECK(rel_diff(du, du_ref) < tolerance(dt));
    }
}

TEST_CASE("kernels on the GPU: cross-entropy and AdamW = their references", "[kernels][gpu]") {
  if (!have_gpu()) return;
  for (auto dt : kDtypes)
    for (auto [n, v] : {std::pair<int64_t, int64_t>{1, 5}, {9, 1001}, {64, 49152}, {37, 128256}}) {
      INFO("cross-entropy " << c10::toString(dt) << " N " << n << " V " << v);
      auto z = (torch::randn({n, v}, on_gpu(torch::kFloat32)) * 4).to(dt);
      auto t = torch::randint(0, v, {n}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kInt64));
      t[0] = -100;
      auto [l, d] = K::cuda::cross_entropy_forward(z, t, 1.0 / n, false);
      auto [l_ref, d_ref] = K::reference::cross_entropy_forward(z, t, 1.0 / n, false);
      CHECK(rel_diff(l, l_ref) < 1e-5);  // fp32 losses from the same inputs
      CHECK(rel_diff(d, d_ref) < tolerance(dt));
      auto z2 = z.clone();
      auto [l2, d2] = K::cuda::cross_entropy_forward(z2, t, 1.0 / n, /*in_place=*/true);
      CHECK(d2.data_ptr() == z2.data_ptr());
      CHECK(rel_diff(d2, d_ref) < tolerance(dt));
    }
  for (auto dt : kDtypes) {
    INFO("AdamW params " << c10::toString(dt));
    std::vector<torch::Tensor> p[2], m[2], v[2], w[2], g;
    const std::vector<int64_t> sizes = {1, 65536, 65537, 1000003, 5};
    for (auto size : sizes) g.push_back(torch::randn({size}, on_gpu(torch::kFloat32)));
    for (int r = 0; r < 2; ++r)
      for (auto size : sizes) {
        torch::manual_seed(size);
        w[r].push_back(torch::randn({size}, on_gpu(torch::kFloat32)));
        p[r].push_back(dt == torch::kFloat32 ? w[r].back() : w[r].back().to(dt));
        m[r].push_back(torch::zeros({size}, on_gpu(torch::kFloat32)));
        v[r].push_back(torch::zeros({size}, on_gpu(torch::kFloat32)));
      }
    const std::vector<bool> decay = {true, false, true, true, false};
    for (int64_t step = 1; step <= 3; ++step) {
      const K::AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1, 0.7, step};
      K::cuda::adamw_step(p[0], w[0], g, m[0], v[0], decay, h);
      K::reference::adamw_step(p[1], w[1], g, m[1], v[1], decay, h);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      CHECK(rel_diff(w[0][i], w[1][i]) < 1e-6);
      CHECK(rel_diff(p[0][i], p[1][i]) < tolerance(dt));
      CHECK(rel_diff(v[0][i], v[1][i]) < 1e-6);
    }
  }
}

TEST_CASE("kernels on the GPU: flash attention (wmma) and rung 0 (naive) = the reference (GQA, causal, odd S)",
          "[kernels][gpu]") {
  if (!have_gpu()) return;
  struct Rung {
    const char* name;
    decltype(&K::cuda::flash_attention_forward) forward;
    decltype(&K::cuda::flash_attention_backward) backward;
  };
  for (const Rung& rung : {Rung{"wmma", K::cuda::flash_attention_forward, K::cuda::flash_attention_backward},
                           Rung{"naive", K::cuda::attention_naive_forward, K::cuda::attention_naive_backward}})
  for (auto dt : {torch::kBFloat16, torch::kHalf})
    for (auto [s, nh, nkv, hd] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 2, 1, 64}, {77, 4, 2, 64},
                                  {130, 6, 2, 128}, {1024, 16, 4, 128}})
      for (bool causal : {true, false}) {
        INFO(rung.name << " " << c10::toString(dt) << " S " << s << " nH " << nh << " nKV " << nkv << " Hd " << hd
                      << " causal " << causal);
        auto q = torch::randn({2, nh, s, hd}, on_gpu(dt)), k = torch::randn({2, nkv, s, hd}, on_gpu(dt)),
             v = torch::randn({2, nkv, s, hd}, on_gpu(dt));
        const double scale = 1.0 / std::sqrt(double(hd));
        auto [o, lse] = rung.forward(q, k, v, scale, causal);
        auto [o_ref, lse_ref] = K::reference::flash_attention_forward(q, k, v, scale, causal);
        CHECK(rel_diff(o, o_ref) < tolerance(dt));
        CHECK(rel_diff(lse, lse_ref) < 1e-3);
        auto dout = torch::randn_like(o);
        auto [dq, dk, dv] = rung.backward(dout, q, k, v, o, lse, scale, causal);
        auto [dq_ref, dk_ref, dv_ref] = K::reference::flash_attention_backward(dout, q, k, v, o_ref, lse_ref, scale, causal);
        CHECK(rel_diff(dv, dv_ref) < 2 * tolerance(dt));  // P and dS rounded to 16 bits before their products
        if (s == 1) {
          // One key: P = 1 whatever the scores, so softmax's gradient dS = P (dP - D) is exactly 0
          // (dP = dO.v = D), and so are dq and dk. Both sides hold rounding noise there (the
          // reference's in 16-bit arithmetic), and a relative difference of two noises is
          // meaningless (it read 0.7-4.8 on the H100): check that the kernel's are ~0 against
          // the gradients' own size, |dv|.
          const double size = dv_ref.abs().max().item<double>();
          CHECK(dq.abs().max().item<double>() <= 1e-2 * size);
          CHECK(dk.abs().max().item<double>() <= 1e-2 * size);
        } else {
          CHECK(rel_diff(dq, dq_ref) < 2 * tolerance(dt));
          CHECK(rel_diff(dk, dk_ref) < 2 * tolerance(dt));
        }
      }
}
