// runtime/observe/report.h — what a run prints and writes: the model summary, what each rank
// of the mesh allocates under its plan (both printed by --dry-run), the per-step line,
// the logging interval, and the JSON metrics file (--metrics-file, nlohmann-json).
//
// Test: ctest -L cli   (cli.dry_run_*, cli.log_interval, cli.train_metrics)
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "runtime/cli/train_config.h"
#include "picotron/data.h"
#include "runtime/output/output_file.h"
#include "picotron/shard.h"
#include "runtime/observe/measure.h"

namespace picotron {

// The model summary of --dry-run and of every run's start: exact counts, no allocation.
std::string model_summary(const TrainConfig& c);
// What each rank of the mesh allocates under its plan: parameters, their bytes in the
// compute dtype, and the AdamW training state (fp32 master unless the compute dtype is
// fp32/fp64, fp32 main grad, two fp32 moments). One line per distinct rank, pure.
std::string plan_summary(const TrainConfig& c, const MeshShape& shape,
                         const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of);

// "data: arithmetic; global batch 64 x 64 = 4,096 tokens/step (micro-batch ...); data
// parallelism: bucketed"
std::string data_summary(const TrainConfig& c, const BatchLoader& loader);

// What a step reports.
struct StepStats {
  int64_t step = 0, steps = 0;  // 1-based step, of steps
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0;
  double mfu = -1;              // < 0: unknown (CPU)
  int64_t peak_mem_bytes = 0;
  bool skipped = false;         // fp16 overflow: the optimizer step was skipped
  std::optional<double> val_loss;  // --val-data: on the steps that evaluate
  std::vector<double> tokens_per_expert;  // MoE: (token, slot) pairs per expert, summed over layers and the global batch
  double expert_imbalance() const;        // max / mean of tokens_per_expert (1: perfectly balanced)
};
// "step    10/100 | loss 2.34567 | val 2.45678 | lr ... | grad norm ... | tok/s | mfu | mem"
std::string step_line(const StepStats& s);
// Print every step of short runs, about 50 lines otherwise; always the first and last.
// log_every > 0 overrides the interval.
bool should_log(int64_t step, int64_t steps, int log_every);

// --metrics-file: one JSON object per step (nlohmann-json), each line written (and the
// write checked) as the step ends, into "<path>.tmp"; finish() renames it into place
// (runtime/output/output_file.h). Inactive with an empty path.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  void write(const StepStats& s);
  void finish() { out_.commit(); }

 private:
  OutputFile out_;
};

// --memory-trace: one JSON object per phase of each step (this rank's tensor memory,
// runtime/observe/measure.h): {"step", "phase", "micro", "t", "bytes", "peak"}. Phases: "start",
// "forward" and "backward" of each micro-batch (or "pipeline" for a whole pipeline
// step), "sync", "optimizer". scripts/plot_memory.py draws it.
class MemoryTraceWriter {
 public:
  explicit MemoryTraceWriter(const std::string& path);
  bool enabled() const { return out_.active(); }
  void write(int64_t step, const std::string& phase, int64_t micro, double seconds, int64_t bytes, int64_t peak);
  void finish() { out_.commit(); }

 private:
  OutputFile out_;
};

// What a training run reports as it goes, and when it gives up. Rank 0 prints the step
// line (every --log-every) and writes --metrics-file and --memory-trace. Every rank
// applies --max-bad-steps alike (the loss and the norm are global): a step whose loss, or
// whose gradient norm outside fp16 (where an overflow just skips the step), is not finite
// counts as bad.
struct RunLogSettings {  // built from the run's config in runtime/cli/settings.h
  int log_every = 0;                     // --log-every (0: about 50 lines a run)
  int max_bad_steps = 0;                 // --max-bad-steps
  bool fp16 = false;                     // --dtype fp16: an overflow skips a step, not a bad one
  std::string metrics_file, memory_trace;  // --metrics-file, --memory-trace (rank 0 writes them)
};
class RunLog {
 public:
  RunLog(const RunLogSettings& s, int rank, torch::Device device);
  // --memory-trace: this rank's tensor memory now, at `phase` of step `step` (1-based).
  void memory(int64_t step, const char* phase, int64_t micro = -1);
  // After a step: print and write it. False when the run diverged (the error printed on
  // rank 0, the files finished): stop with exit code 3.
  bool step_done(const StepStats& s);
  void finish();  // the files renamed into place

 private:
  RunLogSettings settings_;
  int rank_;
  torch::Device device_;
  MetricsWriter metrics_;
  MemoryTraceWriter memory_trace_;
  Timer clock_;  // --memory-trace's time axis
  int bad_steps_ = 0;
  int64_t last_good_step_ = 0;
  double last_good_loss_ = 0;
};

}  // namespace picotron
