// runtime/launch/job_exit.h — how a job ends before it trains: every rank's line, then one exit.
//
// Setup errors (bad flags, a missing file, ranks given different flags) are found by every
// rank alike, before any Comm exists. Each rank prints its own line (report_error), then:
//
//   rank 0 ──print──┐
//   rank 1 ──print──┼── MPI_Ibarrier, polled (at most `timeout`) ──> exit(code) together
//   rank 2 ──print──┘
//
// Without the wait, mpirun kills the slower ranks as soon as the first one exits, before
// they could print. Both calls below are bounded: a rank that never arrives costs `timeout`,
// not a hang. (An error during training aborts the job instead: Distributed::abort_job.)
//
// Test: ctest -L cli (bad flags under mpirun); ctest -R config_mismatch
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "picotron/distributed.h"

namespace picotron {

// After each rank has printed its error, wait (at most `timeout`) until all ranks got
// here, then exit with `code`.
[[noreturn]] void exit_together(const Distributed& dist, int code, std::chrono::seconds timeout);

// Every rank's `mine` (the same length on all), rank after rank, over MPI_COMM_WORLD before
// any Comm exists; empty when MPI is not running (torchrun) or when some rank did not
// answer within `timeout`.
std::vector<uint64_t> all_gather_bounded(const Distributed& dist, const std::vector<uint64_t>& mine,
                                         std::chrono::seconds timeout);

}  // namespace picotron
