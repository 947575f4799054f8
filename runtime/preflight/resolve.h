// runtime/preflight/resolve.h — the run's config, resolved and agreed before anything runs.
//
//   flags ─parse_args─> RunConfig ─resolve_config─> config.json's shape, the tokenizer's vocabulary
//                                 ─config_problems─> the rules between flags, on that shape
//                                 ─config_mismatch─> every rank was given the same flags
//                                 ─resolve_device──> --device auto, the --dtype default (a run only)
//
// These are the only writes to the run's config after the flags are read; everything
// after them reads it, or the settings cut from it (runtime/cli/settings.h).
//
// Test: ctest -R 'hf\.|tokenizer|config_mismatch'   (config.json's shape and its problems,
//       the vocabulary that follows the data, ranks given different flags)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "picotron/distributed.h"
#include "runtime/cli/run_config.h"

namespace picotron {

// The run's config is written in two steps after the flags are read, and by nothing else;
// each says what it changed ("hidden_size 128 -> 2048 (config.json)", one per field):
//   resolve_config  --init-from's config.json (the model's shape) and the vocabulary of
//                   --tokenizer or of the data's manifest; before the flag rules, which then
//                   judge the shape the run will have (rank 0 prints its changes)
//   resolve_device  for a run (not --dry-run or --plan, which describe GPUs whatever this
//                   machine has), after every check: --device auto and the --dtype default
//                   (bf16 on a GPU, fp32 on the CPU), which the launch line then shows
// No communication, no file written.
struct ResolvedConfig {
  std::vector<std::string> problems;  // one line each (config.json or the flag named)
  std::vector<std::string> changes;
};
ResolvedConfig resolve_config(RunConfig& cfg);
std::vector<std::string> resolve_device(TrainConfig& cfg);
// The rules between the flags (check_flag_rules) against the launch's world size
// (--dry-run: the mesh's); a rule that config.json's values break names config.json.
std::vector<std::string> config_problems(const RunConfig& cfg, const LaunchInfo& launch);
// Every rank's settings (config_fields), hashed and compared in one all-gather bounded by
// --timeout-s: "" when all agree, else one line naming a flag that differs. `config` is
// empty on a rank whose flags did not parse (it reports that itself). Collective.
std::string config_mismatch(const std::optional<RunConfig>& config, const LaunchInfo& launch,
                            const Distributed& dist);

}  // namespace picotron
