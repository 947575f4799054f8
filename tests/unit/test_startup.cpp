// Unit tests of runtime/preflight/startup.h that need no second rank: the out-of-memory line, --fp8
// on a GPU without fp8 units.
// (The checks against real files, memory and ranks: ctest -L reliability.)
#include <catch2/catch.hpp>

#include "runtime/preflight/startup.h"
#include "runtime/cli/train_config.h"

using namespace picotron;

TEST_CASE("an allocator's out-of-memory error becomes one line naming the flags", "[startup]") {
  TrainConfig cfg;
  cfg.device = "cuda", cfg.micro_batch_size = 32, cfg.seq_len = 4096;
  // c10::OutOfMemoryError's text (CUDA caching allocator), several lines in reality.
  const auto cuda = out_of_memory_message(
      "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB "
      "is free.\nIncluding non-PyTorch memory, this process has 77.00 GiB memory in use.", cfg);
  CHECK(cuda == "out of memory on cuda: an allocation of 2.00 GiB failed; the run needed more than --dry-run's "
                "estimate or than was free: lower --micro-batch-size (32) or --seq-len (4096), use --recompute "
                "full, --zero or more --tp/--pp ranks");
  cfg.device = "cpu";
  const auto cpu = out_of_memory_message(
      "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
      "allocate 67108864 bytes. Error code 12 (Cannot allocate memory)", cfg);
  CHECK(cpu.rfind("out of memory on cpu: an allocation of 64.00 MiB failed; ", 0) == 0);
  CHECK(out_of_memory_message("std::bad_alloc", cfg).rfind("out of memory on cpu: std::bad_alloc; ", 0) == 0);
  // Anything else is not rewritten.
  CHECK(out_of_memory_message("all_reduce timed out after 5 s", cfg).empty());
}

TEST_CASE("fp8 (the --fp8 flag) on a GPU older than compute capability 8.9 is refused before the run; CPU and Ada/Hopper pass",
          "[startup][fp8]") {
  TrainConfig cfg;
  cfg.fp8 = true, cfg.device = "cuda";
  const GpuFacts a100{true, 8, 0, "NVIDIA A100-SXM4-80GB"}, l4{true, 8, 9, "NVIDIA L4"}, h100{true, 9, 0, "NVIDIA H100"};
  CHECK(fp8_device_problem(cfg, a100) ==
        "--fp8 needs fp8 tensor cores (compute capability 8.9 or newer: Ada, Hopper); NVIDIA A100-SXM4-80GB is 8.0 "
        "(use --dtype bf16 without --fp8)");
  CHECK(fp8_device_problem(cfg, GpuFacts{true, 7, 5, "Tesla T4"}).find("Tesla T4 is 7.5") != std::string::npos);
  CHECK(fp8_device_problem(cfg, l4).empty());
  CHECK(fp8_device_problem(cfg, h100).empty());
  cfg.device = "auto";  // auto runs on the visible GPU: refused too, and says so
  CHECK(fp8_device_problem(cfg, a100).find("--device auto chose this GPU; --device cpu emulates fp8") != std::string::npos);
  CHECK(fp8_device_problem(cfg, GpuFacts{}).empty());  // auto without a GPU: the CPU, emulated
  cfg.device = "cpu";
  CHECK(fp8_device_problem(cfg, a100).empty());  // the emulation runs anywhere
  cfg.device = "cuda", cfg.fp8 = false;
  CHECK(fp8_device_problem(cfg, a100).empty());  // no --fp8: nothing to refuse
}
