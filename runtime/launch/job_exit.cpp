// runtime/launch/job_exit.cpp — see job_exit.h.
//
// Test: ctest -L cli (bad flags on several ranks: every rank's line, then one exit);
//       ctest -R config_mismatch
#include "runtime/launch/job_exit.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <mpi.h>

namespace picotron {

void exit_together(const Distributed& dist, int code, std::chrono::seconds timeout) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (dist.has_mpi()) {
    MPI_Request barrier;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done && std::chrono::steady_clock::now() < deadline) {
      MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (done && dist.owns_mpi()) MPI_Finalize();  // everyone has reported: leave cleanly
  }
  std::_Exit(code);
}

std::vector<uint64_t> all_gather_bounded(const Distributed& dist, const std::vector<uint64_t>& mine,
                                         std::chrono::seconds timeout) {
  if (!dist.has_mpi()) return {};
  std::vector<uint64_t> all(mine.size() * size_t(dist.world_size()));
  MPI_Request request;
  MPI_Iallgather(mine.data(), int(mine.size()), MPI_UINT64_T, all.data(), int(mine.size()), MPI_UINT64_T,
                 MPI_COMM_WORLD, &request);
  int done = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!done) return {};  // (the request is left pending: the job is about to end)
  return all;
}

}  // namespace picotron
