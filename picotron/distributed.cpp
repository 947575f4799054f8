// picotron/distributed.cpp — who am I? Launch detection, MPI start-up, the GPU choice.
//
// detect_launch() only reads an environment map; Distributed applies the answer:
//
//   launcher   rank / world size / local rank                         runtime started here
//   --------   -----------------------------------------------------  --------------------
//   torchrun   RANK / WORLD_SIZE / LOCAL_RANK (+ MASTER_ADDR/PORT)    none: NCCL's id goes
//                                                                      through a TCPStore
//   mpirun     OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK              MPI_Init_thread
//   PMI        PMI_RANK / PMI_SIZE / MPI_LOCALRANKID (MPICH, Intel)    MPI_Init_thread
//   srun       SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID             MPI_Init_thread
//   nothing    0 / 1 / 0                                              MPI_Init_thread
//                                                                      (a singleton world)
//
// The innermost launcher wins, because launchers nest and each one leaves its variables
// behind: `srun torchrun ...` and `mpirun` inside an sbatch script both inherit
// SLURM_PROCID. So torchrun (recognised by TORCHELASTIC_RUN_ID, which only its agent
// sets) comes first, then OpenMPI and PMI, then Slurm, then a bare RANK/WORLD_SIZE pair.
//
// A torchrun job with one process is run like a single process (MPI singleton), so
// `--device cpu` works under it too; with more processes there is no MPI at all.
//
// Test: ctest -R distributed   (tests/unit/test_distributed.cpp: every launcher, bad values)
#include "picotron/distributed.h"

#include <thread>

#include <charconv>
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

extern char** environ;

namespace picotron {

using Env = std::map<std::string, std::string>;

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

namespace {

[[noreturn]] void bad_env(const std::string& name, const std::string& value, const std::string& why) {
  throw std::invalid_argument("launch environment: " + name + "=\"" + value + "\" " + why);
}

// Strict integer parsing: "12abc", " 12", "" and out-of-range values are errors.
int parse_int(const Env& env, const std::string& name, int min_value) {
  const std::string& s = env.at(name);
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    bad_env(name, s, "is not an integer");
  if (value < min_value) bad_env(name, s, "must be at least " + std::to_string(min_value));
  return value;
}

bool parse_bool(const Env& env, const std::string& name) {
  const std::string& s = env.at(name);
  if (s == "True" || s == "true" || s == "1") return true;
  if (s == "False" || s == "false" || s == "0") return false;
  bad_env(name, s, "is not a boolean (True or False)");
}

// Fills rank / world size / local rank from the three variables of one launcher.
LaunchInfo from_vars(const Env& env, Launcher launcher, const std::string& rank_var,
                     const std::string& size_var, const std::string& local_var) {
  for (const std::string& v : {rank_var, size_var})
    if (!env.count(v))
      throw std::invalid_argument("launch environment: " + v + " is not set, but the other " +
                                  launcher_name(launcher) + " variables are");
  LaunchInfo info;
  info.launcher = launcher;
  info.world_size = parse_int(env, size_var, /*min_value=*/1);
  info.rank = parse_int(env, rank_var, /*min_value=*/0);
  if (info.rank >= info.world_size)
    bad_env(rank_var, env.at(rank_var), "must be below " + size_var + "=" + std::to_string(info.world_size));
  if (!local_var.empty() && env.count(local_var)) {
    info.local_rank = parse_int(env, local_var, /*min_value=*/0);
    if (info.local_rank >= info.world_size)
      bad_env(local_var, env.at(local_var), "must be below " + size_var + "=" + std::to_string(info.world_size));
  }
  return info;
}

LaunchInfo from_torchrun(const Env& env) {
  LaunchInfo info = from_vars(env, Launcher::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK");
  if (info.world_size > 1) {  // several processes must meet somewhere: the TCPStore
    for (const char* v : {"MASTER_ADDR", "MASTER_PORT"})
      if (!env.count(v) || env.at(v).empty())
        throw std::invalid_argument(std::string("launch environment: ") + v + " is not set, but WORLD_SIZE=" +
                                    std::to_string(info.world_size) + " (torchrun sets both)");
    info.master_addr = env.at("MASTER_ADDR");
    info.master_port = parse_int(env, "MASTER_PORT", /*min_value=*/1);
    if (info.master_port > 65535) bad_env("MASTER_PORT", env.at("MASTER_PORT"), "is not a TCP port (1..65535)");
  }
  if (env.count("LOCAL_WORLD_SIZE")) info.local_world_size = parse_int(env, "LOCAL_WORLD_SIZE", /*min_value=*/1);
  if (env.count("TORCHELASTIC_USE_AGENT_STORE"))
    info.agent_store = parse_bool(env, "TORCHELASTIC_USE_AGENT_STORE");
  if (env.count("TORCHELASTIC_RESTART_COUNT"))
    info.restart_count = parse_int(env, "TORCHELASTIC_RESTART_COUNT", /*min_value=*/0);
  return info;
}

}  // namespace

LaunchInfo detect_launch(const Env& env) {
  auto has = [&](const char* name) { return env.count(name) > 0; };
  if (has("TORCHELASTIC_RUN_ID")) return from_torchrun(env);
  if (has("OMPI_COMM_WORLD_RANK") || has("OMPI_COMM_WORLD_SIZE"))
    return from_vars(env, Launcher::kMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                     "OMPI_COMM_WORLD_LOCAL_RANK");
  if (has("PMI_RANK") || has("PMI_SIZE"))
    return from_vars(env, Launcher::kPmi, "PMI_RANK", "PMI_SIZE", has("MPI_LOCALRANKID") ? "MPI_LOCALRANKID" : "");
  if (has("SLURM_PROCID") && has("SLURM_NTASKS"))
    return from_vars(env, Launcher::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
  if (has("RANK") || has("WORLD_SIZE")) return from_torchrun(env);
  return LaunchInfo{};  // a single process
}

std::map<std::string, std::string> process_environment() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
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

void Distributed::exit_together(int code, std::chrono::seconds timeout) const {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_initialised_) {
    MPI_Request barrier;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done && std::chrono::steady_clock::now() < deadline) {
      MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (done && owns_mpi_) MPI_Finalize();  // everyone has reported: leave cleanly
  }
  std::_Exit(code);
}

std::vector<uint64_t> Distributed::all_gather(const std::vector<uint64_t>& mine, std::chrono::seconds timeout) const {
  if (!mpi_initialised_) return {};
  std::vector<uint64_t> all(mine.size() * size_t(info_.world_size));
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
