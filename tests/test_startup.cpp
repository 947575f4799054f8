// Unit tests of runtime/startup.h that need no second rank: the out-of-memory line.
// (The checks against real files, memory and ranks: ctest -L reliability.)
#include <catch2/catch.hpp>

#include "runtime/startup.h"

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
