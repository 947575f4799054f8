// runtime/launch/launch_env.cpp — who am I? The launcher's variables read into a LaunchInfo.
//
//   launcher   rank / world size / local rank                         runtime started later
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
// (The "runtime started" column is picotron/distributed.cpp's Distributed.)
//
// Test: ctest -R distributed   (tests/unit/test_distributed.cpp: every launcher, bad values)
#include "runtime/launch/launch_env.h"

#include <charconv>
#include <stdexcept>

extern char** environ;

namespace picotron {

using Env = std::map<std::string, std::string>;


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

}  // namespace picotron
