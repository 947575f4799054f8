// runtime/observe/step_watch.h — what one training step tells the runtime, through one object:
// the phase it enters. From that one call
//
//   --explain         prints a heading above the communications that follow,
//   --profile         opens a named range (and closes the previous one),
//   --memory-trace    records the memory held as the previous phase ends:
//
//   begin ─"start"─ forward ─"forward"─ backward ─"backward"─ ... grad sync ─"sync"─
//         optimizer ─"optimizer"─ loss
//
// so train.cpp's step reads as the lesson (forward, backward, sync, clip, step) with one
// line per phase. Every output is off unless its flag is given.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/observe/explain.h"
#include "runtime/observe/profile.h"
#include "runtime/observe/report.h"

namespace picotron {

class Distributed;

enum class StepPhase { kForward, kBackward, kPipeline, kGradSync, kOptimizer, kLoss };

struct StepWatchSettings {  // built from the run's config in runtime/cli/settings.h
  int64_t grad_acc_steps = 1;  // --grad-acc-steps: "micro-batch 2 of 4"
  std::string pp_schedule;     // --pp-schedule, named in the pipeline's heading
};

class StepWatch {
 public:
  // `first_step`: the step --explain narrates (a resumed run's first); 0-based. Throws the
  // line that refuses a --profile-steps range the run has already passed (a resumed run).
  StepWatch(const StepWatchSettings& s, torch::Device device, Explainer& explain, StepProfiler& profile, RunLog& log,
            int64_t first_step);
  void begin(int64_t step);                           // 0-based; the peak memory reset, "start"
  void phase(StepPhase phase, int64_t micro = -1);    // entering `phase` (micro-batch `micro`)
  bool explaining() const { return explain_.on(); }   // --explain
  void action(const std::string& what);               // --explain: a pipeline action's heading, in its phase
  void end(const Distributed& dist);                  // --explain: rank 0 prints the narration (collective)
  std::string profile_table(int64_t step);            // --profile: the table after its last step (else empty)

 private:
  StepWatchSettings settings_;
  torch::Device device_;
  Explainer& explain_;
  StepProfiler& profile_;
  RunLog& log_;
  int64_t first_step_, step_ = 0;
  const char* ending_ = nullptr;  // the memory point the current phase ends with
  int64_t ending_micro_ = -1;
};

}  // namespace picotron
