// runtime/cli/settings.cpp — each piece's settings from the run's config. See settings.h.
#include "runtime/cli/settings.h"

namespace picotron {

LrSchedule lr_schedule(const TrainConfig& cfg) { return {cfg.lr, cfg.min_lr, cfg.warmup_steps, cfg.steps}; }

CpSettings cp_settings(const TrainConfig& cfg) {
  return {parse_cp_layout(cfg.cp_layout), parse_cp_mode(cfg.cp_mode), cfg.cp_ulysses};
}

}  // namespace picotron
