// runtime/preflight/run_dir.h — --run-dir DIR: every output of a run under one folder, with
// fixed names, so that scripts/run_report.py DIR can draw the run whole (DIR/report.html).
//
//   DIR/command.txt        the command line, as given                        rank 0, at start
//   DIR/config.json        every flag's value (the table's config_fields)     rank 0, at start
//   DIR/run.json           mesh, each rank's coordinates and holdings, the
//                          model, the machine                                 rank 0, at start
//   DIR/estimate.json      the run's own memory estimate per rank (--dry-run's
//                          parts: runtime/planner/memory_estimate.h)          rank 0, at start
//   DIR/metrics.jsonl      --metrics-file                                     rank 0, per step
//   DIR/memory.jsonl       --memory-trace                                     rank 0, per phase
//   DIR/pp_trace.json      --pp-trace (--pp > 1)                              rank 0, at the end
//   DIR/narration.txt      --explain's narration of the first step            rank 0
//   DIR/flight/            --flight-recorder, with --flight-dump-at-end on    each rank its file
//   DIR/profile/           --profile, when --profile-steps is given           each rank its files
//   DIR/rank-<R>.json      rank R's ledger (calls and elements per group and
//                          kind, the training steps only) and measured peak   each rank, at the end
//
// A flag given on the command line keeps its own path (--metrics-file m.jsonl puts the
// metrics there, the rest still goes under DIR). Nothing is written twice: a shared file by
// rank 0 only, a rank's own file by that rank. Every file goes through OutputFile
// (runtime/output/output_file.h): written to <path>.tmp, renamed into place when whole.
//
// Test: ctest -L report   (tests/cmake/report_tests.cmake)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "picotron/mesh.h"
#include "picotron/shard.h"
#include "runtime/cli/run_config.h"

namespace picotron {

// The output flags still empty, pointed under cfg.run_dir (nothing when it is empty), and
// the command line kept for DIR/command.txt. Pure.
void apply_run_dir(TrainConfig& cfg, int argc, const char* const* argv);

// Makes DIR (and its parents). "" when it is a writable folder now, else one line naming
// --run-dir and what is wrong (a file is there, no permission). Never removes anything.
std::string prepare_run_dir(const std::string& dir);

// Rank 0, at the start: DIR/command.txt, DIR/config.json, DIR/run.json and DIR/estimate.json
// (pure arithmetic over the mesh and the plans). Throws one line naming --run-dir.
void write_run_start(const TrainConfig& cfg, const MeshShape& shape,
                     const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of, const std::string& device,
                     const std::string& launcher);

// Every rank: DIR/rank-<R>.json, its ledger per group (since Mesh::reset_ledgers) and its
// peak tensor memory of the last step.
void write_rank_end(const std::string& dir, Comm& world, int64_t steps, int64_t peak_bytes);

}  // namespace picotron
