// picotron/distributed.h — how this process learns who it is.
//
// A process learns (rank, world size, local rank) from its launcher. Launchers nest
// (`srun torchrun ...`, `mpirun` inside an sbatch script) and each leaves its variables
// behind, so the innermost one wins:
//   1. torchrun (TORCHELASTIC_RUN_ID set; RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
//      MASTER_PORT)                                             -> no MPI; NCCL's id goes
//                                                                  through a c10d TCPStore
//   2. mpirun (OpenMPI: OMPI_COMM_WORLD_*), another PMI launcher (PMI_RANK/PMI_SIZE),
//      srun (Slurm: SLURM_PROCID/NTASKS/LOCALID)                -> MPI is initialised
//   3. a bare RANK/WORLD_SIZE pair (as torchrun exports)        -> as torchrun
//   4. nothing: a single process, world size 1                  -> MPI is initialised as a
//                                                                  singleton (world of 1)
// A torchrun job of one process is treated like a single process (MPI singleton).
//
// Reading the environment is pure (detect_launch) so it can be unit-tested; the
// Distributed object owns the side effects (MPI_Init / MPI_Finalize, cudaSetDevice).
// Malformed values throw std::invalid_argument with one line naming the variable.
//
// Test: ctest -R distributed
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

// Pure: reads only the given environment (tests pass a map; main passes the real one).
// "[rank r] error: msg" on stderr as ONE write(2), so that the lines of ranks failing at
// once never interleave (rank < 0: no rank to name).
void report_error(int rank, const std::string& msg);

LaunchInfo detect_launch(const std::map<std::string, std::string>& env);
// The real process environment as a map.
std::map<std::string, std::string> process_environment();

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

  // Select this rank's GPU (local_rank modulo the device count); returns its index.
  int select_cuda_device() const;

  // Kill the whole job after an error on this rank (MPI_Abort, or _exit for torchrun).
  [[noreturn]] void abort_job(int code) const;

  // For setup errors that every rank finds alike (bad flags, a missing file): after each
  // rank has printed its error, wait (at most `timeout`) until all ranks got here, then
  // exit with `code`. Without the wait, mpirun kills the slower ranks as soon as the
  // first one exits, before they could print.
  [[noreturn]] void exit_together(int code, std::chrono::seconds timeout) const;
  // Every rank's `mine` (the same length on all), rank after rank; empty when MPI is not
  // running (torchrun) or when some rank did not answer within `timeout`.
  std::vector<uint64_t> all_gather(const std::vector<uint64_t>& mine, std::chrono::seconds timeout) const;

 private:
  LaunchInfo info_;
  bool mpi_initialised_ = false;  // MPI is usable (by us or by whoever started it first)
  bool owns_mpi_ = false;         // we called MPI_Init, so we call MPI_Finalize
};

}  // namespace picotron
