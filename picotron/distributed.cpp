// picotron/distributed.cpp — MPI start-up (bounded), the local rank, the GPU choice, the abort.
//
// The launcher's variables were read by runtime/launch/launch_env.cpp (detect_launch).
// A torchrun job with one process is run like a single process (MPI singleton), so
// `--device cpu` works under it too; with more processes there is no MPI at all.
//
// Test: ctest -R distributed   (tests/unit/test_distributed.cpp: every launcher, bad values)
#include "picotron/distributed.h"

#include <thread>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include <unistd.h>

#include <mpi.h>

#ifdef PICOTRON_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "picotron/comm_internal.h"

namespace picotron {

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::kSingle: return "single process";
    case Launcher::kMpi: return "mpirun (OpenMPI)";
    case Launcher::kSlurm: return "srun (Slurm)";
    case Launcher::kPmi: return "PMI (MPICH / Intel MPI)";
    case Launcher::kTorchrun: return "torchrun";
  }
  return "?";
}

// ---- Distributed --------------------------------------------------------------

RendezvousDeadline::RendezvousDeadline(int rank, std::string what, std::chrono::seconds timeout) {
  watcher_ = std::thread([this, rank, what = std::move(what), timeout] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_changed_.wait_for(lock, timeout, [this] { return done_; })) return;  // finished in time
    report_error(rank, "start-up: " + what + " did not finish within " + std::to_string(timeout.count()) +
                           " s (--timeout-s): a rank stopped, crashed or never started");
    std::_Exit(2);  // MPI may be half-initialised: no MPI_Abort; the launcher ends the other ranks
  });
}

void RendezvousDeadline::disarm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  done_changed_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

Distributed::Distributed(const LaunchInfo& info, std::chrono::seconds timeout) : info_(info) {
  if (info_.launcher == Launcher::kTorchrun && info_.world_size > 1) return;  // NCCL only, no MPI

  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised)
    throw std::runtime_error("MPI was already finalised in this process: create one Distributed per process");
  RendezvousDeadline deadline(info_.rank, "MPI_Init and the node split (every rank must reach them)", timeout);
  if (!initialised) {
    // SERIALIZED: only one thread calls MPI at a time (all our calls come from the main thread).
    int provided = 0;
    PICOTRON_MPI_CHECK(info_.rank, MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    owns_mpi_ = true;
  }
  mpi_initialised_ = true;

  int mpi_rank = 0, mpi_size = 1;
  PICOTRON_MPI_CHECK(info_.rank, MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank));
  PICOTRON_MPI_CHECK(info_.rank, MPI_Comm_size(MPI_COMM_WORLD, &mpi_size));
  if (info_.launcher == Launcher::kSingle && mpi_size > 1) {
    // An MPI launcher whose variables we do not know: MPI itself knows the answer.
    info_.launcher = Launcher::kMpi;
    info_.rank = mpi_rank;
    info_.world_size = mpi_size;
  }
  if (mpi_rank != info_.rank || mpi_size != info_.world_size)
    throw std::runtime_error(std::string("launch: ") + launcher_name(info_.launcher) + "'s environment says rank " +
                             std::to_string(info_.rank) + " of " + std::to_string(info_.world_size) +
                             ", but MPI started rank " + std::to_string(mpi_rank) + " of " +
                             std::to_string(mpi_size) + " (was the program started with the matching launcher?)");

  // The local rank picks the GPU. MPI knows which processes share this node's memory,
  // which is exactly "the processes of this node", whatever the launcher exported.
  MPI_Comm node = MPI_COMM_NULL;
  PICOTRON_MPI_CHECK(info_.rank, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, /*key=*/mpi_rank,
                                                     MPI_INFO_NULL, &node));
  PICOTRON_MPI_CHECK(info_.rank, MPI_Comm_rank(node, &info_.local_rank));
  PICOTRON_MPI_CHECK(info_.rank, MPI_Comm_size(node, &info_.local_world_size));
  MPI_Comm_free(&node);
  deadline.disarm();
}

Distributed::~Distributed() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (owns_mpi_ && !finalised) MPI_Finalize();
}

int Distributed::select_cuda_device() const {
#ifdef PICOTRON_WITH_CUDA
  const int count = c10::cuda::device_count();
  if (count == 0)
    throw std::runtime_error("[rank " + std::to_string(rank()) + "] --device cuda: no CUDA device is visible");
  const int device = local_rank() % count;  // one GPU per local rank (NCCL refuses two ranks on one GPU)
  c10::cuda::set_device(device);
  return device;
#else
  throw std::runtime_error("[rank " + std::to_string(rank()) +
                           "] --device cuda: this build has no CUDA support (it needs a CUDA LibTorch, "
                           "a CUDA toolkit and NCCL at configure time)");
#endif
}

void report_error(int rank, const std::string& msg) {
  const std::string line = (rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "") + "error: " + msg + "\n";
  std::fflush(stdout);
  if (::write(2, line.data(), line.size()) < 0) std::perror("write");
}

void Distributed::abort_job(int code) const {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  // mpirun / srun then kill every rank (alone, there is nobody to kill: no MPI banner)
  if (mpi_initialised_ && info_.world_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // torchrun: its agent sees the exit code and stops the other workers
}

}  // namespace picotron
