// picotron/distributed.h — the process-wide runtime the communicators are built on.
//
// A process knows who it is (LaunchInfo: rank, world size, local rank) from its launcher
// (read by runtime/launch/launch_env.h: detect_launch). Distributed applies the answer:
//
//   mpirun, srun, PMI, a single process   MPI_Init_thread (bounded: RendezvousDeadline),
//                                          the node split that gives the local rank
//   torchrun with several processes       no MPI: NCCL's id goes through a c10d TCPStore
//   --device cuda                          cudaSetDevice(local rank % device count)
//
// A rank that fails takes the job down (abort_job: MPI_Abort). How a job ends before it
// trains (every rank's line, then one exit) is the runtime's: runtime/launch/job_exit.h.
//
// Test: ctest -R distributed
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace picotron {

enum class Launcher { kSingle, kMpi, kSlurm, kPmi, kTorchrun };
const char* launcher_name(Launcher l);

struct LaunchInfo {
  Launcher launcher = Launcher::kSingle;
  int rank = 0;        // global rank in [0, world_size)
  int world_size = 1;  // number of processes in the job
  int local_rank = 0;  // rank among the processes of this node: picks the GPU
  int local_world_size = 1;  // processes on this node (from MPI when MPI runs; else 1, or torchrun's LOCAL_WORLD_SIZE)
  std::string master_addr;  // torchrun only
  int master_port = 0;      // torchrun only
  bool agent_store = false; // torchrun with TORCHELASTIC_USE_AGENT_STORE=True
  int restart_count = 0;    // torchrun's TORCHELASTIC_RESTART_COUNT (agent-store key prefix)
};

// "[rank r] error: msg" on stderr as ONE write(2), so that the lines of ranks failing at
// once never interleave (rank < 0: no rank to name).
void report_error(int rank, const std::string& msg);

// Bounds one start-up rendezvous (MPI_Init, communicator set-up: calls that wait for
// every rank and have no timeout of their own). If the scope has not ended (or disarm()
// was not called) within `timeout`, a rank stopped or never started: this rank prints
//   [rank r] error: start-up: <what> did not finish within N s (--timeout-s) ...
// and ends with exit code 2; the launcher (mpirun, srun) then ends the others.
// A watcher thread waits on a condition variable, so a disarmed deadline costs nothing.
class RendezvousDeadline {
 public:
  RendezvousDeadline(int rank, std::string what, std::chrono::seconds timeout);
  ~RendezvousDeadline() { disarm(); }
  void disarm();  // the rendezvous completed: stop the watcher
  RendezvousDeadline(const RendezvousDeadline&) = delete;
  RendezvousDeadline& operator=(const RendezvousDeadline&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::thread watcher_;
};

// RAII owner of the process-wide runtime: MPI when the launcher is MPI-like or single,
// and the CUDA device (local_rank % device count) once select_cuda_device() is called.
// One per process, created first and destroyed last (after every Comm).
class Distributed {
 public:
  // Starts MPI unless torchrun launched several processes, checks that MPI agrees with
  // the environment, and takes the local rank from MPI (the ranks sharing this node).
  // MPI_Init and the node split wait for every rank: each is bounded by `timeout`
  // (RendezvousDeadline), so a rank that never starts cannot hang the others.
  explicit Distributed(const LaunchInfo& info, std::chrono::seconds timeout = std::chrono::seconds(300));
  ~Distributed();  // MPI_Finalize (only if we initialised MPI)
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  const LaunchInfo& info() const { return info_; }
  int rank() const { return info_.rank; }
  int world_size() const { return info_.world_size; }
  int local_rank() const { return info_.local_rank; }
  int local_world_size() const { return info_.local_world_size; }
  bool has_mpi() const { return mpi_initialised_; }
  bool owns_mpi() const { return owns_mpi_; }  // we called MPI_Init (and so MPI_Finalize)

  // Select this rank's GPU (local_rank modulo the device count); returns its index.
  int select_cuda_device() const;

  // Kill the whole job after an error on this rank (MPI_Abort, or _exit for torchrun).
  [[noreturn]] void abort_job(int code) const;

 private:
  LaunchInfo info_;
  bool mpi_initialised_ = false;  // MPI is usable (by us or by whoever started it first)
  bool owns_mpi_ = false;         // we called MPI_Init, so we call MPI_Finalize
};

}  // namespace picotron
