// AdamW against its formula, the LR schedule, clipping, gradient accumulation
// (float64: k x (B/k) equals one step of B) and a tiny model that learns.
#include <catch2/catch.hpp>

#include <cmath>

#include "picotron/data.h"
#include "picotron/init.h"
#include "picotron/model.h"
#include "picotron/optim.h"

using namespace picotron;

namespace {

std::vector<std::pair<std::string, torch::Tensor>> named(torch::nn::Module& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

LlamaConfig tiny64() {
  LlamaConfig c = preset("tiny");
  c.hidden_size = 32; c.intermediate_size = 64; c.num_hidden_layers = 2;
  return c;
}

}  // namespace

TEST_CASE("AdamW step matches the formula (fp64)", "[optim]") {
  auto w = torch::randn({3, 4}, torch::kFloat64).requires_grad_(true);
  auto norm_gain = torch::randn({4}, torch::kFloat64).requires_grad_(true);
  AdamW opt({{"w", w}, {"n.weight", norm_gain}}, {0.9, 0.95, 1e-8, 0.1});
  auto w0 = w.detach().clone(), n0 = norm_gain.detach().clone();
  auto g = torch::randn({3, 4}, torch::kFloat64), gn = torch::randn({4}, torch::kFloat64);
  opt.params()[0].main_grad.copy_(g);
  opt.params()[1].main_grad.copy_(gn);
  opt.step(0.01);
  // t = 1: m_hat = g, v_hat = g^2 -> update = g / (|g| + eps)
  auto expected_w = w0 * (1 - 0.01 * 0.1) - 0.01 * g / (g.abs() + 1e-8);
  auto expected_n = n0 - 0.01 * gn / (gn.abs() + 1e-8);  // no decay on 1-D (norm) parameters
  CHECK((w.detach() - expected_w).abs().max().item<double>() < 1e-14);
  CHECK((norm_gain.detach() - expected_n).abs().max().item<double>() < 1e-14);
}

TEST_CASE("bf16 params keep fp32 master weights and main grads", "[optim]") {
  auto w = torch::randn({8}, torch::kFloat32).to(torch::kBFloat16).requires_grad_(true);
  AdamW opt({{"w", w}}, {});
  CHECK(opt.params()[0].master.scalar_type() == torch::kFloat32);
  CHECK(opt.params()[0].main_grad.scalar_type() == torch::kFloat32);
  (w.to(torch::kFloat32) * 3).sum().backward();
  opt.accumulate_grads();
  CHECK_FALSE(w.grad().defined());
  CHECK(opt.params()[0].main_grad.sum().item<double>() == Approx(24.0));
}

TEST_CASE("LR: linear warmup, cosine to min_lr at the last step", "[optim]") {
  const LrSchedule c{/*lr=*/1.0, /*min_lr=*/0.1, /*warmup_steps=*/10, /*steps=*/110};
  CHECK(lr_at(0, c) == Approx(0.1));
  CHECK(lr_at(9, c) == Approx(1.0));
  CHECK(lr_at(10, c) == Approx(1.0));
  CHECK(lr_at(59, c) == Approx(0.55).margin(0.01));
  CHECK(lr_at(109, c) == Approx(0.1));
}

TEST_CASE("clip_grad_norm scales to the threshold and returns the norm before", "[optim]") {
  auto w = torch::zeros({2}, torch::kFloat64).requires_grad_(true);
  AdamW opt({{"w", w}}, {});
  opt.params()[0].main_grad.copy_(torch::tensor({3.0, 4.0}, torch::kFloat64));
  CHECK(clip_grad_norm(opt.params(), 1.0) == Approx(5.0));
  CHECK(grad_norm(opt.params()) == Approx(1.0).epsilon(1e-6));
  CHECK(clip_grad_norm(opt.params(), 10.0) == Approx(1.0).epsilon(1e-6));  // below: unchanged
  CHECK(grad_norm(opt.params()) == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("gradient accumulation: 4 x (B/4) equals one step of B (fp64)", "[optim]") {
  auto src = open_data("arithmetic", 256, 16);
  auto run = [&](int64_t micro, int64_t acc) {
    LlamaForCausalLM m(tiny64());
    m->to(torch::kFloat64);
    init_parameters(*m, 3, 0.02);
    AdamW opt(named(*m), {});
    BatchLoader loader(src, 5, 16, micro, acc, 1);
    std::vector<double> losses;
    for (int64_t step = 0; step < 3; ++step) {
      opt.zero_main_grads();
      double loss_sum = 0;
      for (int64_t k = 0; k < acc; ++k) {
        auto b = loader.micro_batch(step, k, 0);
        auto loss = m->loss(b.inputs, b.targets) / double(acc);
        loss.backward();
        opt.accumulate_grads();
        loss_sum += loss.item<double>();
      }
      clip_grad_norm(opt.params(), 1.0);
      opt.step(1e-3);
      losses.push_back(loss_sum);
    }
    return std::make_pair(losses, opt.params());
  };
  auto [loss_full, params_full] = run(8, 1);
  auto [loss_acc, params_acc] = run(2, 4);
  for (size_t i = 0; i < loss_full.size(); ++i) CHECK(std::abs(loss_full[i] - loss_acc[i]) <= 1e-9 * loss_full[i]);
  for (size_t i = 0; i < params_full.size(); ++i) {
    auto d = (params_full[i].param - params_acc[i].param).abs().max().item<double>();
    CHECK(d <= 1e-9 * params_full[i].param.abs().max().item<double>());
  }
}

TEST_CASE("a tiny model learns: loss falls well below its start in 40 steps", "[optim][train]") {
  torch::set_num_threads(1);
  LlamaForCausalLM m(tiny64());
  init_parameters(*m, 1, 0.02);
  AdamW opt(named(*m), {0.9, 0.95, 1e-8, 0.0});
  BatchLoader loader(open_data("arithmetic", 256, 32), 1, 32, 8, 1, 1);
  double first = 0, last = 0;
  for (int64_t step = 0; step < 40; ++step) {
    opt.zero_main_grads();
    auto b = loader.micro_batch(step, 0, 0);
    auto loss = m->loss(b.inputs, b.targets);
    loss.backward();
    opt.accumulate_grads();
    clip_grad_norm(opt.params(), 1.0);
    opt.step(3e-3);
    (step == 0 ? first : last) = loss.item<double>();
  }
  INFO("first loss " << first << ", last loss " << last);
  CHECK(first == Approx(std::log(256.0)).epsilon(0.05));  // uniform over 256 bytes at init
  CHECK(last < 0.5 * first);
}

TEST_CASE("fp32/fp64 main grads ARE param.grad: accumulation in place, equal to a plain backward", "[optim]") {
  auto src = open_data("arithmetic", 256, 16);
  BatchLoader loader(src, 5, 16, /*B=*/2, /*acc=*/2, 1);
  LlamaForCausalLM m(tiny64()), ref(tiny64());
  m->to(torch::kFloat64);
  ref->to(torch::kFloat64);
  init_parameters(*m, 3, 0.02);
  init_parameters(*ref, 3, 0.02);
  AdamW opt(named(*m), {});
  opt.zero_main_grads();
  for (int64_t k = 0; k < 2; ++k) {  // two micro-batches, no hooks: autograd accumulates into main_grad
    auto b = loader.micro_batch(0, k, 0);
    (m->loss(b.inputs, b.targets) / 2.0).backward();
    (ref->loss(b.inputs, b.targets) / 2.0).backward();
    opt.accumulate_grads();  // a no-op for aliased grads
  }
  for (auto& p : opt.params()) {
    CHECK(p.aliases_grad());
    CHECK(p.param.grad().is_same(p.main_grad));
    CHECK(torch::allclose(p.main_grad, ref->named_parameters()[p.name].grad(), 1e-12, 1e-15));
  }
  // bf16 params: a separate fp32 main grad that the bf16 grads are added into.
  LlamaForCausalLM h(tiny64());
  h->to(torch::kBFloat16);
  AdamW opt16(named(*h), {});
  CHECK_FALSE(opt16.params().front().aliases_grad());
  CHECK(opt16.params().front().main_grad.scalar_type() == torch::kFloat32);
}

TEST_CASE("clipping folded into the update equals clipping the grads, then stepping", "[optim]") {
  auto make = [] {
    auto w = torch::tensor({3.0, -4.0, 1.0}, torch::kFloat64).requires_grad_();
    auto opt = std::make_unique<AdamW>(std::vector<std::pair<std::string, torch::Tensor>>{{"w", w}},
                                       AdamWOptions{0.9, 0.95, 1e-8, 0.1, /*fused_step=*/{}});
    return std::make_pair(w, std::move(opt));
  };
  auto [w1, a] = make();
  auto [w2, b] = make();
  for (int step = 0; step < 3; ++step) {
    a->params()[0].main_grad.copy_(torch::tensor({30.0, 40.0, -5.0 * step}, torch::kFloat64));
    b->params()[0].main_grad.copy_(a->params()[0].main_grad);
    const double norm = clip_grad_norm(a->params(), 1.0);
    a->step(0.01);
    b->step(0.01, clip_coefficient(norm, 1.0));
    CHECK(torch::allclose(w1, w2, 1e-13, 1e-15));
  }
  CHECK(clip_coefficient(0.5, 1.0) == 1.0);
  CHECK(clip_coefficient(INFINITY, 1.0) == 1.0);
  CHECK(clip_coefficient(10.0, 0.0) == 1.0);  // clipping off
}
