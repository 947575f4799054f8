// runtime/observe/profile.cpp — --profile: LibTorch's Kineto profiler around steps A..B,
// a Chrome trace per rank and a table of the top operators. See profile.h.
#include "runtime/observe/profile.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "runtime/output/output_file.h"

namespace picotron {
namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

StepProfiler::StepProfiler(std::string dir, int64_t first, int64_t last, int64_t end_step, int rank, bool cuda)
    : dir_(std::move(dir)), rank_(rank), cuda_(cuda) {
  if (dir_.empty()) return;
  // Default: two steps after the warm-up (the first steps allocate, build caches, tune cuDNN).
  first_ = first > 0 ? first : std::min<int64_t>(3, end_step);
  last_ = first > 0 ? last : std::min<int64_t>(first_ + 1, end_step);
  std::filesystem::create_directories(dir_);  // (startup checked that it can be created)
}

std::string StepProfiler::range_problem(int64_t start_step) const {
  if (dir_.empty() || first_ > start_step) return "";
  return "--profile-steps " + std::to_string(first_) + ":" + std::to_string(last_) + ": this run resumes after step " +
         std::to_string(start_step) + ", so step " + std::to_string(first_) +
         " never runs here (give --profile-steps A:B with A > " + std::to_string(start_step) + ")";
}

std::string trace_problem(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "was not written (" + std::string(std::strerror(errno)) + ")";
  const std::streamoff size = in.tellg();
  if (size <= 0) return "is empty";
  // A Chrome trace is one JSON object: cut short (a full disk), it does not end with '}'.
  char last = ' ';
  for (std::streamoff back = 1; back <= size && std::isspace(static_cast<unsigned char>(last)); ++back) {
    in.seekg(size - back);
    in.get(last);
  }
  in.seekg(0);
  char first = ' ';
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {}
  if (first != '{' || last != '}') return "is cut short (" + std::to_string(size) + " bytes, not one whole JSON object)";
  return "";
}

StepProfiler::~StepProfiler() {
  range_.reset();
  if (recording_) prof::disableProfiler();  // a run that stopped early: nothing is written
}

void StepProfiler::step_begins(int64_t step) {
  if (dir_.empty() || step != first_ || recording_) return;
  const std::set<impl::ActivityType> activities =
      cuda_ ? std::set<impl::ActivityType>{impl::ActivityType::CPU, impl::ActivityType::CUDA}
            : std::set<impl::ActivityType>{impl::ActivityType::CPU};
  // On a CPU run, Kineto (built for CUDA in the torch wheel) would log "ERROR ...
  // gpuGetDeviceCount failed" when it looks for GPUs: a user's own KINETO_LOG_LEVEL wins.
  if (!cuda_) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/true);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  recording_ = true;
}

void StepProfiler::phase(const char* name) {
  if (!recording_) return;
  range_.reset();  // ends the previous phase
  range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (range_->isActive()) range_->before(name, c10::ArrayRef<const c10::IValue>{});
}

std::string StepProfiler::step_ends(int64_t step) {
  if (!recording_) return "";
  range_.reset();
  if (step < last_) return "";
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  recording_ = false;
  const std::string base = dir_ + "/";
  const std::string trace = base + "trace-rank" + std::to_string(rank_) + ".json";
  std::remove(trace.c_str());  // (a trace of an earlier run must not pass for this one's)
  result->save(trace);  // LibTorch's writer only logs a failure: the file is checked here
  if (const std::string problem = trace_problem(trace); !problem.empty())
    throw std::runtime_error("--profile " + dir_ + ": the trace " + trace + " " + problem);
  std::string table = "profile of steps " + std::to_string(first_) + "-" + std::to_string(last_) + " (rank " +
                      std::to_string(rank_) + "): trace " + trace + " (open it in https://ui.perfetto.dev)\n" +
                      top_operators_table(*result, 15);
  write_file("--profile", base + "top-rank" + std::to_string(rank_) + ".txt", table + "\n");  // throws one line
  return table;
}

std::string top_operators_table(const prof::ProfilerResult& result, int rows) {
  struct Total {
    int64_t calls = 0;
    uint64_t ns = 0;
  };
  std::map<std::string, Total> cpu, gpu, phases;  // name -> calls, total time
  uint64_t gpu_ns = 0;
  for (const auto& e : result.events()) {
    const bool kernel = e.deviceType() == c10::DeviceType::CUDA;
    auto& table = kernel ? gpu : e.scope() == uint8_t(at::RecordScope::USER_SCOPE) ? phases : cpu;
    Total& t = table[e.name()];
    t.calls += 1;
    t.ns += e.durationNs();
    if (kernel) gpu_ns += e.durationNs();
  }
  auto print = [rows](std::ostringstream& o, const std::string& title, const std::map<std::string, Total>& table,
                      uint64_t share_of) {
    std::vector<std::pair<std::string, Total>> sorted(table.begin(), table.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
    o << title << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "  %10s %7s %7s  %s\n", "total ms", "calls", "share", "name");
    o << line;
    for (size_t i = 0; i < sorted.size() && int(i) < rows; ++i) {
      const auto& [name, t] = sorted[i];
      const std::string shown = name.size() > 90 ? name.substr(0, 87) + "..." : name;
      std::snprintf(line, sizeof line, "  %10.3f %7lld %6.1f%%  %s\n", t.ns / 1e6, static_cast<long long>(t.calls),
                    share_of ? 100.0 * double(t.ns) / double(share_of) : 0.0, shown.c_str());
      o << line;
    }
  };
  uint64_t phase_ns = 0;
  for (const auto& [name, t] : phases) phase_ns += t.ns;
  std::ostringstream o;
  print(o, "phases (named ranges of train.cpp; share of their sum):", phases, phase_ns);
  print(o, "CPU operators by total time (nested: aten::linear includes its aten::mm; share of the phases):", cpu,
        phase_ns);
  if (!gpu.empty()) print(o, "CUDA kernels by total time (share of the GPU's busy time):", gpu, gpu_ns);
  else o << "CUDA kernels: none recorded (a CPU run)\n";
  return o.str();
}

}  // namespace picotron
