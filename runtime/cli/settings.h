// runtime/cli/settings.h — the run's config (TrainConfig, runtime/cli/train_config.h) cut
// into what each piece below the runtime reads, in one place: the step's learning-rate
// schedule, context parallelism's settings. Pure: no communication, no tensors.
//
// Test: build/tests/unit_tests "[config]"
#pragma once

#include "context_parallel/context_parallel.h"
#include "picotron/optim.h"
#include "runtime/cli/train_config.h"

namespace picotron {

LrSchedule lr_schedule(const TrainConfig& cfg);  // --lr, --min-lr, --warmup-steps, --steps
CpSettings cp_settings(const TrainConfig& cfg);  // --cp-layout, --cp-mode, --cp-ulysses

}  // namespace picotron
