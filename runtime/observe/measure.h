// runtime/observe/measure.h — measuring a run: FLOPs and MFU, memory, a timer.
//
// MFU (model FLOPs utilisation), picotron's convention:
//   flops per token = 6 N_matmul + 12 L H S
//     6 N_matmul  forward (2) + backward (4) flops per weight of every matrix multiply:
//                 N_matmul = parameters - the embedding (a lookup, not a matmul) + the
//                 lm_head (V x H, a matmul even when tied to the embedding)
//     12 L H S    attention scores and weighted sum (q k^T and p v), forward + backward
//   MFU = flops per token x tokens/s / (peak FLOP/s per GPU x GPUs)
// Peak: dense bf16 of the device; 989.5 TFLOP/s for H100 and H200 (SXM).
//
// Test: build/tests/unit_tests "[measure]"   (or ctest -L unit)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "picotron/config.h"

namespace picotron {

// Weights that take part in a matrix multiply: parameters - embedding + lm_head.
int64_t matmul_parameters(const LlamaConfig& c);
double flops_per_token(const LlamaConfig& c, int64_t seq_len);
// Dense bf16 peak FLOP/s of the current CUDA device (0 when unknown or on the CPU).
double device_peak_flops(torch::Device device);
// Tensor memory. CUDA: the caching allocator's statistics. CPU: once
// count_cpu_tensor_memory() has run, a counting wrapper around LibTorch's CPU allocator
// gives the exact bytes of live tensors (max RSS is too coarse to teach with: it holds
// libraries and what the C allocator keeps); before that, the resident set's high-water
// mark (VmHWM).
void count_cpu_tensor_memory();  // installs the counter: call before allocating what should count
int64_t current_memory_bytes(torch::Device device);
// The peak since the last reset_peak_memory().
int64_t peak_memory_bytes(torch::Device device);
void reset_peak_memory(torch::Device device);
// The machine's MemAvailable (/proc/meminfo), in bytes; 0 when unknown.
int64_t available_memory_bytes();

// Wall-clock timer; on CUDA the caller synchronises before reading it (the loss .item()
// at the end of a step does).
class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  void reset() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace picotron
