// runtime/preflight/preflight.h — main()'s two calls: everything before the run, and the
// run with its one way out on an error.
//
//   preflight(argc, argv)
//     flags (../cli/) ── --help ─────────────────────────────────────> exit 0
//     the launcher's environment (../launch/launch_env.h) ── broken ──> exit 2
//     --check-checkpoint ───────────────────────────────────────────> its own exit code
//     config resolved, the flag rules (resolve.h) ──┐
//     --dry-run, --plan: answered, nothing launched ──────────────────> exit 0 (1: no trace)
//     outputs, machine, memory, data (startup.h) ───┤ every rank prints its problems
//     --device auto, the --dtype default            │
//     MPI started, bounded by --timeout-s (picotron/distributed.h)
//     the same flags on every rank (one bounded all-gather)
//     any problem: the ranks leave together (../launch/job_exit.h) ──> exit 2
//   run_or_abort(ready, run)
//     the run; if it throws: one line (an allocation that failed names the flags to
//     change), and the job aborted (MPI_Abort), so no rank waits forever.
//
// Test: ctest -L cli; ctest -L reliability; ctest -R bad_inputs
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "picotron/distributed.h"
#include "runtime/cli/run_config.h"
#include "runtime/planner/layout_search.h"
#include "runtime/preflight/startup.h"

namespace picotron {

// What pre-flight hands the run: a checked config on every rank, the data opened, MPI up.
struct Launched {
  std::optional<int> exit_code;  // set: nothing to run, leave main with it
  RunConfig config;
  DataSources data;                   // --data and --val-data, opened and checked
  std::unique_ptr<Distributed> dist;  // destroyed last (MPI_Finalize), after the run
};

// `shard_plan_for`: what a rank holds on a mesh (train.cpp's composition of the
// techniques), for the memory check, --dry-run and --plan.
Launched preflight(int argc, char** argv, const ShardPlanFor& shard_plan_for);

// `run` on a launched job; an exception becomes one line on stderr and the job's abort.
int run_or_abort(const Launched& ready, const std::function<int()>& run);

}  // namespace picotron
