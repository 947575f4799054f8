// GPU tests: they print "SKIPPED: no CUDA device" (ctest reports them skipped) on a
// machine without a GPU, and run on a GPU machine.
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "picotron/comm.h"
#include "picotron/distributed.h"
#include "runtime/launch/launch_env.h"
#include "picotron/init.h"
#include "picotron/model.h"
#include "picotron/optim.h"

#ifdef PICOTRON_WITH_CUDA
#include <ATen/cuda/Sleep.h>  // at::cuda::sleep: a kernel that spins for a number of cycles
#endif

using namespace picotron;

namespace {

bool have_gpu() {
  if (torch::cuda::is_available()) return true;
  WARN("SKIPPED: no CUDA device");
  return false;
}

LlamaConfig gpu_config() {
  LlamaConfig c = preset("tiny");
  c.num_hidden_layers = 2;
  return c;
}

}  // namespace

TEST_CASE("bf16 forward and backward on the GPU match the fp64 CPU model", "[gpu]") {
  if (!have_gpu()) return;
  auto c = gpu_config();
  LlamaForCausalLM ref(c), gpu(c);
  ref->to(torch::kFloat64);
  gpu->to(torch::Device(torch::kCUDA), torch::kBFloat16);
  init_parameters(*ref, 11, 0.02);
  init_parameters(*gpu, 11, 0.02);
  auto tokens = torch::randint(0, c.vocab_size, {4, 64}, torch::kInt64);
  auto targets = torch::randint(0, c.vocab_size, {4, 64}, torch::kInt64);
  auto loss_ref = ref->loss(tokens, targets);
  auto loss_gpu = gpu->loss(tokens.cuda(), targets.cuda());
  loss_ref.backward();
  loss_gpu.backward();
  // bf16 has an 8-bit mantissa (relative rounding 2^-9 ~ 2e-3 per op): a loss within 1%
  // and gradients within 5% of their norm show the same math.
  CHECK(loss_gpu.item<double>() == Approx(loss_ref.item<double>()).epsilon(0.01));
  for (auto& p : ref->named_parameters()) {
    auto g_ref = p.value().grad();
    auto g_gpu = gpu->named_parameters()[p.key()].grad().to(torch::kCPU, torch::kFloat64);
    INFO(p.key());
    CHECK((g_gpu - g_ref).norm().item<double>() <= 0.05 * g_ref.norm().item<double>() + 1e-6);
  }
}

TEST_CASE("a bf16 training step on the GPU uses fp32 master weights and lowers the loss", "[gpu]") {
  if (!have_gpu()) return;
  auto c = gpu_config();
  LlamaForCausalLM m(c);
  m->to(torch::Device(torch::kCUDA), torch::kBFloat16);
  init_parameters(*m, 3, 0.02);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& p : m->named_parameters()) named.emplace_back(p.key(), p.value());
  AdamW opt(named, {});
  CHECK(opt.params()[0].master.scalar_type() == torch::kFloat32);
  auto tokens = torch::randint(0, c.vocab_size, {8, 32}, torch::kInt64).cuda();
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {  // memorise one batch
    opt.zero_main_grads();
    auto loss = m->loss(tokens, tokens);
    loss.backward();
    opt.accumulate_grads();
    clip_grad_norm(opt.params(), 1.0);
    opt.step(1e-2);
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.5 * first);
}

// comm_nccl.cpp's watchdog: a synchronous NCCL call is queued with an event, and dropped
// once the GPU has run it. (Its timeout path ends the process: it is not run here.)
TEST_CASE("comm: the NCCL watchdog watches a synchronous call until the GPU has run it", "[gpu][comm]") {
  if (!have_gpu()) return;
#ifdef PICOTRON_WITH_CUDA
  Distributed dist(detect_launch(process_environment()));  // a single process: world size 1
  Comm world = Comm::world(dist, torch::Device(torch::kCUDA, 0), std::chrono::seconds(60));
  REQUIRE(world.size() == 1);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA);
  torch::Tensor x = torch::arange(1024, f32);

  // An all_reduce over a group of one is a shortcut: NCCL is not called, nothing to watch.
  world.all_reduce(x);
  CHECK(world.pending_sync_ops() == 0);
  CHECK(world.ledger().empty());

  // Point-to-point is never shortcut: a send to itself and a receive from itself go
  // through ncclSend + ncclRecv on the current stream. A spinning kernel queued first
  // keeps the stream busy, so the operation is still pending when batch_p2p returns.
  at::cuda::sleep(int64_t(200) * 1000 * 1000);  // ~0.1 s at ~2 GHz
  torch::Tensor got = torch::zeros({1024}, f32);
  world.batch_p2p({{P2POp::kSend, x, /*peer=*/0}, {P2POp::kRecv, got, /*peer=*/0}});
  CHECK(world.pending_sync_ops() == 1);

  torch::cuda::synchronize();  // the GPU has run everything: the watchdog (2 ms polls) drains
  const auto start = std::chrono::steady_clock::now();
  while (world.pending_sync_ops() > 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(world.pending_sync_ops() == 0);
  CHECK(torch::equal(got.cpu(), x.cpu()));
  CHECK(world.ledger().at("send").elements == 1024);
  CHECK(world.ledger().at("recv").elements == 1024);
#endif
}
