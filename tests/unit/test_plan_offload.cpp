// The planner (runtime/planner/layout_search.h) with what --kernels fused and --zero-offload save:
// the GPU-poor case that nothing else fits, a case that fits without them, and the cost of
// offloading (layout_cost.h). Pure: nothing allocated, no ranks.
//
// Test: build/tests/unit_tests "[plan]"
#include <catch2/catch.hpp>

#include "runtime/cli/train_config.h"
#include "runtime/planner/layout_search.h"

using namespace picotron;

namespace {

// One GPU: every layout holds the whole model.
ShardPlan whole(const TrainConfig& cfg, const MeshCoords&) { return replicated_plan(cfg.llama); }

RunConfig one_gpu(const std::string& model, int64_t seq_len, double gpu_memory_gb) {
  RunConfig c;
  c.model = model;
  c.llama = preset(model);
  c.dtype = Precision::kBF16;
  c.seq_len = seq_len, c.seq_len_given = true;
  c.planner.gpus = 1;
  c.planner.gpu_memory_gb = gpu_memory_gb;
  c.planner.global_batch_tokens = 1 << 20;
  return c;
}

}  // namespace

TEST_CASE("plan: GPU-poor at seq 4096 (a 1.2B model, 24 GB) fits with the fused loss and the optimizer offloaded",
          "[plan]") {
  // Llama-3.2-1B's shape: H 2048, 16 layers, V 128256, 32 heads, 8 kv heads, I 8192, tied.
  RunConfig base = one_gpu("llama3.2-1b", 4096, 24);
  // With ATen's ops and the optimizer on the GPU nothing fits: 28.9 GB at least (the state's
  // 18 bytes a parameter, 22.2 GB, and the [T, V] logits' log-softmax and gradients).
  base.kernels = "aten";
  const LayoutSearch aten = search_layouts(base, 1, whole, 5);
  for (const Candidate& c : aten.best) CHECK(c.cfg.zero_offload);
  base.kernels = "auto";
  const LayoutSearch r = search_layouts(base, 1, whole, 5);
  REQUIRE(!r.best.empty());
  const Candidate& top = r.best[0];
  const std::string command = command_line(top);
  INFO(command);
  CHECK(top.peak_bytes <= 24e9);
  CHECK(top.cfg.zero_offload);
  CHECK(top.cfg.zero >= 1);
  CHECK(top.cfg.kernels == "fused");
  CHECK_THAT(command, Catch::Contains("--kernels fused") && Catch::Contains("--zero 1 --zero-offload"));
  CHECK(top.time.offload > 0);
  CHECK(top.time.total() == Approx(top.time.compute + top.time.bubble + top.time.exposed() + top.time.offload));
  CHECK_THAT(cheatsheet_rule(top, hardware_of(base.planner)), Catch::Contains("ZeRO-Offload"));
}

TEST_CASE("plan: a layout that fits on the GPU does not offload", "[plan]") {
  // The same model on an 80 GB GPU: the optimizer fits beside the activations, and
  // offloading it only adds its copies and the CPU step.
  const RunConfig base = one_gpu("llama3.2-1b", 4096, 80);
  const LayoutSearch r = search_layouts(base, 1, whole, 5);
  REQUIRE(!r.best.empty());
  INFO(command_line(r.best[0]));
  CHECK_FALSE(r.best[0].cfg.zero_offload);
  CHECK(r.best[0].cfg.zero == 0);
  CHECK(command_line(r.best[0]).find("--zero-offload") == std::string::npos);
}

TEST_CASE("plan cost: offloading costs the gradient down, the CPU AdamW and the master up", "[plan]") {
  RunConfig c = one_gpu("llama3.2-1b", 4096, 24);
  c.micro_batch_size = 1, c.grad_acc_steps = 256, c.zero = 1;
  const double P = double(count_parameters(c.llama));
  const Hardware hw = hardware_of(c.planner);
  CHECK(predict_step(c, hw, P).offload == 0);
  c.zero_offload = true;
  const double copy = P * 4 / kPcieBytesPerS;  // fp32, one direction
  CHECK(offload_time(c, P) == Approx(copy + std::max(P / kCpuAdamWElementsPerS, copy)));
  CHECK(predict_step(c, hw, P).offload == Approx(offload_time(c, P)));
  // Over a cp x dp group of 8 each rank steps its 1/8.
  c.dp = 8;
  CHECK(offload_time(c, P) == Approx(copy / 8 + std::max(P / 8 / kCpuAdamWElementsPerS, copy / 8)));
}
