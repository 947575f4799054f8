// runtime/cli/settings.h — the run's config (TrainConfig, runtime/cli/train_config.h) cut
// into what each piece reads, in one place. Each piece declares its own settings struct
// beside its code and never sees the whole config:
//
//   the step            LrSchedule (picotron/optim.h)
//   context parallel    CpSettings (context_parallel/context_parallel.h)
//   checkpoints         CheckpointSettings (runtime/checkpoint/resume.h), WholeModelSettings
//   the end of a run    TextSettings (runtime/text/generate.h)
//   observers           RunLogSettings, StepWatchSettings, FlightSettings, ValidationSettings
//
// Pure: no communication, no tensors. The builders copy fields (the flight recorder's
// directory and run_record's global batch are worked out here), so the cli room links none
// of the rooms whose structs it fills. The one step that rewrites the config, the
// start-up's resolve_config (runtime/preflight/resolve.h), fills its own two: HfShapeFlags
// (config.json) and VocabFlags (the tokenizer).
//
// Test: build/tests/unit_tests "[config]"
#pragma once

#include <nlohmann/json.hpp>

#include "context_parallel/context_parallel.h"
#include "picotron/optim.h"
#include "runtime/checkpoint/resume.h"
#include "runtime/checkpoint/whole_model.h"
#include "runtime/cli/train_config.h"
#include "runtime/observe/flight_dump.h"
#include "runtime/observe/report.h"
#include "runtime/observe/step_watch.h"
#include "runtime/observe/validation.h"
#include "runtime/text/generate.h"

namespace picotron {

LrSchedule lr_schedule(const TrainConfig& cfg);  // --lr, --min-lr, --warmup-steps, --steps
CpSettings cp_settings(const TrainConfig& cfg);  // --cp-layout, --cp-mode, --cp-ulysses
// The run's model, schedule and mesh as JSON: a checkpoint's manifest records it
// ("config"), and --resume compares it with the checkpoint's (CheckpointReader::incompatibilities).
nlohmann::json run_record(const TrainConfig& cfg);
CheckpointSettings checkpoint_settings(const TrainConfig& cfg);  // --save-dir, --save-every, --keep-checkpoints,
                                                                 // --async-save, --resume, --steps, run_record
WholeModelSettings whole_model_settings(const TrainConfig& cfg);  // --save-params, --export-hf, the model
TextSettings text_settings(const TrainConfig& cfg);  // --generate, --eval, --prompt(-ids), --tokenizer, --data ...
RunLogSettings run_log_settings(const TrainConfig& cfg);  // --log-every, --max-bad-steps, --metrics-file, --memory-trace
StepWatchSettings step_watch_settings(const TrainConfig& cfg);  // --grad-acc-steps, --pp-schedule
FlightSettings flight_settings(const TrainConfig& cfg);  // --flight-recorder (or <--save-dir>/flight), its entries
ValidationSettings validation_settings(const TrainConfig& cfg);  // --eval-every, --eval-batches, the batch's shape

}  // namespace picotron
