// runtime/observe/step_watch.cpp — one call per phase, three outputs (step_watch.h).
#include "runtime/observe/step_watch.h"

#include <stdexcept>

#include "runtime/observe/measure.h"
#include "runtime/cli/train_config.h"

namespace picotron {

StepWatch::StepWatch(const StepWatchSettings& s, torch::Device device, Explainer& explain, StepProfiler& profile,
                     RunLog& log, int64_t first_step)
    : settings_(s), device_(device), explain_(explain), profile_(profile), log_(log), first_step_(first_step) {
  if (const std::string p = profile.range_problem(first_step); !p.empty()) throw std::runtime_error(p);
}

void StepWatch::begin(int64_t step) {
  step_ = step;
  if (step == first_step_) explain_.begin(step + 1);
  profile_.step_begins(step + 1);
  reset_peak_memory(device_);  // "mem": this step's peak (tensor memory; on the CPU counted exactly)
  log_.memory(step + 1, "start");
  ending_ = nullptr;
}

void StepWatch::phase(StepPhase phase, int64_t micro) {
  if (ending_) log_.memory(step_ + 1, ending_, ending_micro_);
  const std::string nth = "micro-batch " + std::to_string(micro + 1) + " of " + std::to_string(settings_.grad_acc_steps);
  ending_micro_ = -1;
  switch (phase) {
    case StepPhase::kForward:
      explain_.phase(nth + ": forward"), profile_.phase("forward");
      ending_ = "forward", ending_micro_ = micro;  // the activations kept for backward are all alive then
      break;
    case StepPhase::kBackward:
      explain_.phase(nth + ": backward"), profile_.phase("backward");
      ending_ = "backward", ending_micro_ = micro;
      break;
    case StepPhase::kPipeline:
      explain_.phase("the pipeline: every micro-batch's forward and backward, in " + settings_.pp_schedule +
                     " order (each action as --dry-run prints the program; micro-batches 0-based)");
      profile_.phase("pipeline: forward + backward");
      ending_ = "pipeline";
      break;
    case StepPhase::kGradSync:
      explain_.phase("gradient sync (what backward did not already send)"), profile_.phase("grad sync");
      ending_ = "sync";
      break;
    case StepPhase::kOptimizer:
      explain_.phase("global gradient norm, then the optimizer step"), profile_.phase("grad norm + optimizer");
      ending_ = "optimizer";
      break;
    case StepPhase::kLoss:
      explain_.phase("the loss of the whole global batch"), profile_.phase("loss all-reduce");
      ending_ = nullptr;
      break;
  }
}

void StepWatch::action(const std::string& what) { explain_.phase(" " + what); }

void StepWatch::end(const Distributed& dist) { explain_.end(dist); }

std::string StepWatch::profile_table(int64_t step) { return profile_.step_ends(step + 1); }

}  // namespace picotron
