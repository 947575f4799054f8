// runtime/observe/profile.h — --profile DIR: where a step's time goes, in a file a user
// opens. LibTorch's profiler (Kineto) records the steps of --profile-steps A:B: every ATen
// operator on the CPU and, on a GPU, every CUDA kernel and memory copy, plus the step's
// phases (forward, backward, grad sync, optimizer) as named ranges:
//
//   DIR/trace-rank<R>.json   Chrome trace format: open it in https://ui.perfetto.dev or
//                            chrome://tracing (one per rank: a multi-rank run shows who waits)
//   DIR/top-rank<R>.txt      the table printed at the end (rank 0 prints its own): the
//                            operators and kernels with the most total time, their calls
//                            and share
//
//   step:   A-1     A        ...      B      B+1
//           ----|=========================|----      enable before step A's work,
//               enable                  disable       disable (and save) after step B
//
// CPU operators nest (aten::linear calls aten::matmul calls aten::mm), so their totals
// overlap and the CPU column does not sum to the step; CUDA kernels do not nest: their
// column is the GPU's busy time.
//
// Test: ctest -R cli.profile (tests/cmake/cli_tests.cmake): a CPU run's trace parses as JSON
// and holds the phases, and the table names aten::mm.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace at {
class RecordFunction;
}
namespace torch::autograd::profiler {
struct ProfilerResult;
}

namespace picotron {

class StepProfiler {
 public:
  // dir empty: does nothing. [first, last]: 1-based steps, 0 = the default (3:4 clamped to
  // the run's steps). A resumed run records the range only if it is still ahead.
  StepProfiler(std::string dir, int64_t first, int64_t last, int64_t end_step, int rank, bool cuda);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void step_begins(int64_t step);  // 1-based; starts recording at `first`
  // A named range ("forward", "backward", "grad sync", "optimizer"), ending the previous
  // one; a string literal (the profiler keeps the pointer until the range ends).
  void phase(const char* name);
  // Stops after `last`: writes the trace and the table; returns the table (empty when not
  // the last recorded step) for rank 0 to print.
  std::string step_ends(int64_t step);
  // "" when every recorded step runs in a run that starts after `start_step` (--resume);
  // else the line that refuses it before the first step.
  std::string range_problem(int64_t start_step) const;

  int64_t first() const { return first_; }
  int64_t last() const { return last_; }

 private:
  std::string dir_;
  int64_t first_ = 0, last_ = 0;
  int rank_ = 0;
  bool cuda_ = false;
  bool recording_ = false;
  std::unique_ptr<at::RecordFunction> range_;  // the open phase
};

// The table of a profile: the top `rows` CPU operators and CUDA kernels by total time.
// (Exposed for the tests.)
std::string top_operators_table(const torch::autograd::profiler::ProfilerResult& result, int rows);

// "" when `path` holds a whole Chrome trace (one JSON object, '{' ... '}'); else what is wrong
// ("was not written (...)", "is empty", "is cut short (N bytes ...)").
std::string trace_problem(const std::string& path);

}  // namespace picotron
