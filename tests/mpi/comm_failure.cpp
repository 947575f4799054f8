// tests/mpi/comm_failure.cpp — when one rank fails, the job ends quickly, non-zero, and says why.
//
// Every rank runs ten all_reduces; at step 5, rank 1 fails in one of three ways:
//
//   comm_failure throw   rank 1 throws: it prints "[rank 1] error: ..." and aborts the job
//                        (MPI_Abort); mpirun kills the others, blocked in the all_reduce.
//   comm_failure hang    rank 1 stops answering (sleeps 600 s): the others' all_reduce
//                        gives up after --timeout-s and they print
//                        "[rank 0] error: [rank 0] all_reduce timed out after 3 s: ...".
//   comm_failure kill    rank 1 dies without a word (SIGKILL): mpirun notices and ends
//                        the job (were it not to, the others would time out as in "hang").
//
// main() does what train.cpp's main does: catch, print one line, dist.abort_job(1).
//
// Run:  mpirun -np 2 build-rt/tests/comm_failure hang --timeout-s 3   (exits 1 after ~3 s)
// Test: ctest -R comm_failure   (the exit code must be non-zero and the message must match)
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/distributed.h"
#include "runtime/launch/launch_env.h"

using namespace picotron;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int timeout_s = argc > 3 && !std::strcmp(argv[2], "--timeout-s") ? std::atoi(argv[3]) : 3;
  if (mode != "throw" && mode != "hang" && mode != "kill") {
    std::fprintf(stderr, "usage: comm_failure throw|hang|kill [--timeout-s 3]\n");
    return 2;
  }
  Distributed dist(detect_launch(process_environment()));
  try {
    torch::set_num_threads(1);
    Comm world = Comm::world(dist, torch::kCPU, std::chrono::seconds(timeout_s));
    torch::Tensor t = torch::ones({1024});
    for (int step = 0; step < 10; ++step) {
      if (step == 5 && world.rank() == 1) {
        if (mode == "throw") throw std::runtime_error("rank 1 failed on purpose at step 5");
        if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(600));
        if (mode == "kill") std::raise(SIGKILL);
      }
      world.all_reduce(t);
    }
    std::printf("[rank %d] finished all 10 steps: the failure did not happen\n", dist.rank());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", dist.rank(), e.what());
    dist.abort_job(1);
  }
}
