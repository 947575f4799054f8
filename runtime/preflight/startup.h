// runtime/preflight/startup.h — the checks every rank makes before the first step, so that a run
// which cannot succeed stops at once with one line naming the flag, instead of after
// hours (an output path that cannot be written) or with a crash (ranks given different
// flags, a model too big for the machine).
//
// The config itself, resolved and agreed between the ranks, is resolve.h's.
//
// Test: ctest -L reliability   (tests/cmake/reliability_tests.cmake)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cli/run_config.h"
#include "picotron/data.h"
#include "picotron/distributed.h"

namespace picotron {

// What a real run also needs, checked in order until one fails: every output writable,
// this machine (GPU, kernels, fp8 units for --fp8), the memory this rank will need, and the --data and
// --val-data files (opened into `data`). One line per problem.
struct DataSources {
  std::shared_ptr<TokenSource> train, val;  // val: --val-data, or null
};
std::vector<std::string> run_problems(const TrainConfig& cfg, const LaunchInfo& launch, const ShardPlanOf& shard_plan_of,
                                      DataSources& data);

// The device of this rank (cfg.device, resolved by resolve_config: its GPU, or the CPU)
// and the intra-op threads (--threads, or the node's cores shared by its ranks).
// --wait-for-debugger: the chosen rank (or every rank) prints its pid and waits until a
// debugger is attached (/proc/self/status TracerPid), then goes on; the others wait for it
// in their first collective (each rank's --timeout-s still bounds that). Allows a non-parent
// debugger to attach where Yama restricts ptrace (PR_SET_PTRACER). A no-op for "none".
void wait_for_debugger(const TrainConfig& cfg, int rank);

torch::Device choose_device(const TrainConfig& cfg, const Distributed& dist);

// Every output flag's path checked (runtime/output/output_file.h): one line per problem.
std::vector<std::string> output_problems(const TrainConfig& cfg);

// What this machine and build must have for the flags: a visible GPU for --device cuda
// and --zero-offload, the CUDA kernels for --kernels fused. One line per problem.
std::vector<std::string> machine_problems(const TrainConfig& cfg);

// The GPU this rank will use (local_rank % device count) as the CUDA runtime reports it;
// visible false when there is none (or no CUDA in this build).
struct GpuFacts {
  bool visible = false;
  int major = 0, minor = 0;  // compute capability
  std::string name;          // "NVIDIA A100-SXM4-80GB"
};
GpuFacts gpu_facts(int local_rank);

// --fp8 on a GPU without fp8 tensor cores (kernels/fp8.h: compute capability < 8.9): the
// one line naming the flags, or "". Pure: the flags (--fp8, --device; auto runs on the GPU
// when one is visible) and what `gpu` is. On the CPU fp8 is emulated: no problem.
std::string fp8_device_problem(const TrainConfig& cfg, const GpuFacts& gpu);

// This rank's estimated peak (runtime/planner/memory_estimate.h) against what it has: on the CPU
// MemAvailable shared by the ranks of its node, on a GPU its free memory; one line with
// both numbers and what to change, or "".
std::string memory_problem(const TrainConfig& cfg, const LaunchInfo& launch, const ShardPlanOf& shard_plan_of);

// An allocation that failed anyway (during training: the estimate is not exact, and
// memory is shared): the allocator's error (CPU, CUDA or std::bad_alloc) as one line
// naming the flags to change; "" when `error` is not an out-of-memory.
std::string out_of_memory_message(const std::string& error, const TrainConfig& cfg);

}  // namespace picotron
