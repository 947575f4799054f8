// Tests of kernels/fp8.h on the CPU (the emulation): the scale, the quantisation's error
// bound, and the fp8 linear's forward and both gradients against the recipe written out
// with plain ATen ops in fp64 (equal to 1e-12: the same fp8 values, the same products).
// The fp8 error bound: e4m3 keeps 3 mantissa bits, so a value in the normal range is off
// by at most half an ulp, 2^-4 relative; e5m2 (2 bits) 2^-3.
//
// Run: build/tests/unit_tests "[fp8]"
#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/fp8.h"

using namespace picotron;

namespace {
const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}
}  // namespace

TEST_CASE("fp8 scale: fp8_max / amax, 1 for an all-zero tensor", "[fp8]") {
  CHECK(fp8::scale_from_amax(torch::tensor(2.0), fp8::Format::kE4M3).item<float>() == 224.0f);
  CHECK(fp8::scale_from_amax(torch::tensor(4.0), fp8::Format::kE5M2).item<float>() == 14336.0f);
  CHECK(fp8::scale_from_amax(torch::tensor(0.0), fp8::Format::kE4M3).item<float>() == 1.0f);
}

TEST_CASE("fp8 scale: a tiny amax is floored, so the scale stays finite and nothing becomes NaN", "[fp8]") {
  // 448 / 1e-39 is inf in fp32; inf * 0 = NaN. Floored at 1e-12 (torchao's floor): 4.48e14.
  const auto s = fp8::scale_from_amax(torch::tensor(1e-39, torch::kFloat32), fp8::Format::kE4M3);
  CHECK(std::isfinite(s.item<float>()));
  CHECK(s.item<float>() == Approx(448.0 / fp8::kAmaxFloor).epsilon(1e-6));
  const auto t = torch::tensor({0.0f, 1e-39f, -1e-39f});
  const auto q = fp8::quantize(t, fp8::scale_from_amax(fp8::amax_over({t}, {})[0], fp8::Format::kE4M3), fp8::Format::kE4M3);
  CHECK_FALSE(fp8::dequantize(q, torch::kFloat32).isnan().any().item<bool>());
}

TEST_CASE("fp8 matmul in bf16: one rounding of the fp32 sum, as the tensor cores (not bf16 operands)", "[fp8]") {
  // _scaled_mm multiplies the fp8 values, sums in fp32, applies both scales and rounds once
  // to bf16. The emulation must give those numbers: against the fp64 sum rounded once to bf16,
  // all but a few ties (fp32 vs fp64 accumulation) agree. Rounding each dequantised operand to
  // bf16 first, then a bf16 matmul, disagreed in about half of them.
  torch::manual_seed(3);
  const auto a = torch::randn({64, 128}), b = torch::randn({48, 128});
  const auto qa = fp8::quantize(a, fp8::scale_from_amax(a.abs().max(), fp8::Format::kE4M3), fp8::Format::kE4M3);
  const auto qb = fp8::quantize(b, fp8::scale_from_amax(b.abs().max(), fp8::Format::kE4M3), fp8::Format::kE4M3);
  const auto got = fp8::scaled_mm(qa, qb, torch::kBFloat16);  // [64, 48]
  REQUIRE(got.scalar_type() == torch::kBFloat16);
  const auto exact = qa.data.to(torch::kFloat64).matmul(qb.data.to(torch::kFloat64).t()) /
                     (qa.scale.to(torch::kFloat64) * qb.scale.to(torch::kFloat64));
  const double agree = got.eq(exact.to(torch::kBFloat16)).to(torch::kFloat64).mean().item<double>();
  INFO("share of outputs equal to the once-rounded product: " << agree);
  CHECK(agree > 0.99);
}

TEST_CASE("fp8 quantize: the amax lands on fp8_max, every value within half an ulp", "[fp8]") {
  torch::manual_seed(0);
  const auto x = torch::randn({64, 32}, kF64) * 3;  // [64, 32]
  for (auto [format, bound] : {std::pair{fp8::Format::kE4M3, 1.0 / 16}, {fp8::Format::kE5M2, 1.0 / 8}}) {
    const auto amax = fp8::amax_over({x}, {});  // [1], no group: this tensor alone
    const auto q = fp8::quantize(x, fp8::scale_from_amax(amax[0], format), format);
    CHECK(q.data.scalar_type() == fp8::dtype_of(format));
    CHECK(q.data.to(torch::kFloat64).abs().max().item<double>() == fp8::max_of(format));
    const auto back = fp8::dequantize(q, torch::kFloat64);
    // relative error per element, on the values that stay normal after scaling
    const auto normal = (x * q.scale.to(torch::kFloat64)).abs() > 1.0;
    const auto err = ((back - x).abs() / x.abs()).masked_select(normal);
    CHECK(err.max().item<double>() <= bound * (1 + 1e-12));
    CHECK(rel(back, x) < bound);
  }
}

TEST_CASE("fp8 linear: forward, dX and dW follow the recipe; close to the exact linear", "[fp8]") {
  torch::manual_seed(1);
  const auto x = torch::randn({2, 8, 32}, kF64).requires_grad_();  // [B, S, in]
  const auto w = (torch::randn({16, 32}, kF64) * 0.05).requires_grad_();  // [out, in]
  const auto dy = torch::randn({2, 8, 16}, kF64);                   // [B, S, out]
  const auto y = fp8::linear(x, w, {});
  y.backward(dy);
  // The recipe with plain ops: q4 for x and W, q5 for dY, products in fp64.
  auto q = [](const torch::Tensor& t, fp8::Format f) {
    const auto s = fp8::scale_from_amax(t.abs().max(), f);
    return fp8::dequantize(fp8::quantize(t, s, f), torch::kFloat64);
  };
  const auto xq = q(x.detach().reshape({16, 32}), fp8::Format::kE4M3), wq = q(w.detach(), fp8::Format::kE4M3);
  const auto dyq = q(dy.reshape({16, 16}), fp8::Format::kE5M2);
  CHECK(rel(y.detach().reshape({16, 16}), xq.matmul(wq.t())) < 1e-12);
  CHECK(rel(x.grad().reshape({16, 32}), dyq.matmul(wq)) < 1e-12);
  CHECK(rel(w.grad(), dyq.t().matmul(xq)) < 1e-12);
  // ... and within fp8's few percent of the exact linear and its gradients.
  CHECK(rel(y.detach(), torch::linear(x.detach(), w.detach())) < 0.1);
  CHECK(rel(w.grad(), dy.reshape({16, 16}).t().matmul(x.detach().reshape({16, 32}))) < 0.1);
}

TEST_CASE("fp8 linear module: the same weight tensor as the slot it replaced", "[fp8]") {
  LlamaConfig c;
  c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 1, c.num_attention_heads = 4;
  c.num_key_value_heads = 2, c.vocab_size = 32;
  LlamaForCausalLM model(c);
  const auto before = model->named_parameters()["model.layers.0.mlp.up_proj.weight"];
  const std::string line = fp8::apply_fp8(model, {});
  CHECK(line.find("7 linears") != std::string::npos);
  CHECK(model->named_parameters()["model.layers.0.mlp.up_proj.weight"].is_same(before));
  CHECK(model->named_parameters().size() == LlamaForCausalLM(c)->named_parameters().size());
}
