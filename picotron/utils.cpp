// picotron/utils.cpp — see utils.h.
#include "picotron/utils.h"

#include <fstream>

#include <sys/resource.h>

#include <cstdio>
#include <iostream>

#ifdef PICOTRON_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace picotron {

int64_t matmul_parameters(const LlamaConfig& c) {
  const int64_t table = c.vocab_size * c.hidden_size;  // [V, H]
  // Untied: the embedding is a lookup (subtract it), lm_head is counted in N already.
  // Tied: the one matrix is counted once in N, and it is used as the head: keep it.
  return count_parameters(c) - (c.tie_word_embeddings ? 0 : table);
}

double flops_per_token(const LlamaConfig& c, int64_t seq_len) {
  return 6.0 * double(matmul_parameters(c)) + 12.0 * double(c.num_hidden_layers * c.hidden_size * seq_len);
}

double device_peak_flops(torch::Device device) {
#ifdef PICOTRON_WITH_CUDA
  if (device.is_cuda()) {
    const std::string name = at::cuda::getCurrentDeviceProperties()->name;
    if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989.5e12;
    if (name.find("A100") != std::string::npos) return 312e12;
  }
#endif
  return 0.0;
}

int64_t peak_memory_bytes(torch::Device device) {
#ifdef PICOTRON_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  // The CPU: the resident set's high-water mark, VmHWM, which reset_peak_memory() can lower
  // (getrusage's max RSS cannot be reset: it would report start-up forever).
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   1234 kB"
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

void reset_peak_memory(torch::Device device) {
#ifdef PICOTRON_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
  if (device.is_cpu()) std::ofstream("/proc/self/clear_refs") << "5";  // Linux: VmHWM := the current RSS
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) { bytes /= 1024.0; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, units[u]);
  return buf;
}

void print0(int rank, const std::string& line) {
  if (rank != 0) return;
  std::cout << line << std::endl;
}

torch::ScalarType scalar_type(Precision p) {
  switch (p) {
    case Precision::kFP64: return torch::kFloat64;
    case Precision::kBF16: return torch::kBFloat16;
    case Precision::kFP16: return torch::kFloat16;
    default: return torch::kFloat32;
  }
}

}  // namespace picotron
