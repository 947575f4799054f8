// runtime/observe/measure.cpp — see measure.h.
#include "runtime/observe/measure.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>

#include <sys/resource.h>

#ifdef PICOTRON_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace picotron {

int64_t matmul_parameters(const LlamaConfig& c) {
  const int64_t table = c.vocab_size * c.hidden_size;  // [V, H]
  // Untied: the embedding is a lookup (subtract it), lm_head is counted in N already.
  // Tied: the one matrix is counted once in N, and it is used as the head: keep it.
  // MoE: a token goes through k of the E experts; the other E - k cost it nothing.
  const int64_t idle = c.is_moe() ? c.num_hidden_layers * (c.num_local_experts - c.num_experts_per_tok) * 3 *
                                        c.hidden_size * c.intermediate_size
                                  : 0;
  return count_parameters(c) - (c.tie_word_embeddings ? 0 : table) - idle;
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

namespace {

// Every CPU tensor's bytes pass through here: the wrapper hands out the base
// allocator's memory and counts it until the tensor's storage lets it go. Its data
// pointers stay "simple" (the pointer is its own context, as raw_allocate requires): the
// size of each live allocation is looked up by address when it is freed.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {
    TORCH_CHECK(base->raw_deleter(), "the CPU allocator has no raw deleter to wrap");
    base_free_ = base->raw_deleter();
  }
  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr inner = base_->allocate(bytes);
    void* data = inner.release_context();  // ours now; freed with the base's raw deleter
    if (data) {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[data] = int64_t(bytes);
      const int64_t now = current_ += int64_t(bytes);
      peak_ = std::max(peak_, now);
    }
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { base_->copy_data(dest, src, count); }
  int64_t current() const { std::lock_guard<std::mutex> lock(mutex_); return current_; }
  int64_t peak() const { std::lock_guard<std::mutex> lock(mutex_); return peak_; }
  void reset_peak() { std::lock_guard<std::mutex> lock(mutex_); peak_ = current_; }

 private:
  static void release(void* data) {
    if (!data) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = sizes_.find(data);
      if (it != sizes_.end()) {
        current_ -= it->second;
        sizes_.erase(it);
      }
    }
    base_free_(data);
  }
  c10::Allocator* base_;
  static inline c10::DeleterFnPtr base_free_ = nullptr;
  static inline std::mutex mutex_;  // allocations come from intra-op threads too
  static inline std::unordered_map<void*, int64_t> sizes_;
  static inline int64_t current_ = 0, peak_ = 0;
};

CountingCpuAllocator* cpu_counter = nullptr;

// A "Key:   1234 kB" line of /proc/self/status, in bytes (-1 if absent).
int64_t proc_status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  return -1;
}

// The CUDA caching allocator's allocated bytes, current or peak.
int64_t cuda_allocated_bytes([[maybe_unused]] torch::Device device, [[maybe_unused]] bool peak) {
#ifdef PICOTRON_WITH_CUDA
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto& s = stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)];
  return peak ? s.peak : s.current;
#else
  return 0;
#endif
}

}  // namespace

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoll(line.substr(13)) * 1024;
  return 0;
}

void count_cpu_tensor_memory() {
  if (cpu_counter) return;
  static CountingCpuAllocator counter(c10::GetDefaultCPUAllocator());  // lives as long as the process
  cpu_counter = &counter;
  c10::SetCPUAllocator(cpu_counter, /*priority=*/1);  // above the default's 0: every new CPU tensor
}

int64_t current_memory_bytes(torch::Device device) {
  if (device.is_cuda()) return cuda_allocated_bytes(device, /*peak=*/false);
  if (cpu_counter) return cpu_counter->current();
  return std::max<int64_t>(0, proc_status_bytes("VmRSS"));
}

int64_t peak_memory_bytes(torch::Device device) {
  if (device.is_cuda()) return cuda_allocated_bytes(device, /*peak=*/true);
  if (cpu_counter) return cpu_counter->peak();
  // Without the counter: the resident set's high-water mark, which reset_peak_memory()
  // can lower (getrusage's max RSS cannot be reset: it would report start-up forever).
  if (const int64_t hwm = proc_status_bytes("VmHWM"); hwm >= 0) return hwm;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

void reset_peak_memory(torch::Device device) {
#ifdef PICOTRON_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
  if (device.is_cpu()) {
    if (cpu_counter) cpu_counter->reset_peak();
    else std::ofstream("/proc/self/clear_refs") << "5";  // Linux: VmHWM := the current RSS
  }
}

}  // namespace picotron
