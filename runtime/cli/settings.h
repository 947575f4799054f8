// runtime/cli/settings.h — the run's config (TrainConfig, runtime/cli/train_config.h) cut
// into what each piece reads, in one place: the step's learning-rate schedule, context
// parallelism's settings, the step line's and the step watcher's (runtime/observe/). Pure:
// no communication, no tensors. (The observers' are inline: the cli room does not link
// the observe room.)
//
// Test: build/tests/unit_tests "[config]"
#pragma once

#include "context_parallel/context_parallel.h"
#include "picotron/optim.h"
#include "runtime/cli/train_config.h"
#include "runtime/observe/report.h"
#include "runtime/observe/step_watch.h"

namespace picotron {

LrSchedule lr_schedule(const TrainConfig& cfg);  // --lr, --min-lr, --warmup-steps, --steps
CpSettings cp_settings(const TrainConfig& cfg);  // --cp-layout, --cp-mode, --cp-ulysses

inline RunLogSettings run_log_settings(const TrainConfig& cfg) {
  return {cfg.log_every, cfg.max_bad_steps, cfg.dtype == Precision::kFP16, cfg.metrics_file, cfg.memory_trace};
}
inline StepWatchSettings step_watch_settings(const TrainConfig& cfg) { return {cfg.grad_acc_steps, cfg.pp_schedule}; }

}  // namespace picotron
