// tests/unit/test_distributed.cpp — launch detection from fake environments.
//
// detect_launch() only reads the map it is given, so every launcher (mpirun, srun,
// PMI, torchrun, nothing), the nesting rules (the innermost launcher wins) and every
// malformed value can be tested in one process, without starting any of them.
//
// Test: ctest -R distributed   (or: build/tests/unit_tests "[distributed]")
// Our headers (which pull in LibTorch) come before Catch: c10 defines a CHECK macro of
// its own, and Catch's must be the one that wins.
#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/distributed.h"
#include "runtime/launch/launch_env.h"

#include <catch2/catch.hpp>

using namespace picotron;
using Env = std::map<std::string, std::string>;
using Catch::Contains;

TEST_CASE("distributed: no launcher is a single process", "[distributed]") {
  const LaunchInfo info = detect_launch({{"HOME", "/root"}});
  CHECK(info.launcher == Launcher::kSingle);
  CHECK(info.rank == 0);
  CHECK(info.world_size == 1);
  CHECK(info.local_rank == 0);
}

TEST_CASE("distributed: mpirun (OpenMPI)", "[distributed]") {
  const LaunchInfo info = detect_launch(
      {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  CHECK(info.launcher == Launcher::kMpi);
  CHECK(info.rank == 5);
  CHECK(info.world_size == 8);
  CHECK(info.local_rank == 1);
}

TEST_CASE("distributed: srun (Slurm)", "[distributed]") {
  const LaunchInfo info = detect_launch({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "3"}});
  CHECK(info.launcher == Launcher::kSlurm);
  CHECK(info.rank == 3);
  CHECK(info.world_size == 16);
  CHECK(info.local_rank == 3);
}

TEST_CASE("distributed: PMI (MPICH / Intel MPI)", "[distributed]") {
  const LaunchInfo info = detect_launch({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}});
  CHECK(info.launcher == Launcher::kPmi);
  CHECK(info.rank == 2);
  CHECK(info.world_size == 4);
  CHECK(info.local_rank == 0);
  CHECK(detect_launch({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}).local_rank == 0);  // no local id: MPI tells later
}

TEST_CASE("distributed: torchrun, with the agent's store", "[distributed]") {
  const LaunchInfo info = detect_launch({{"TORCHELASTIC_RUN_ID", "none"},
                                         {"RANK", "6"},
                                         {"WORLD_SIZE", "8"},
                                         {"LOCAL_RANK", "6"},
                                         {"MASTER_ADDR", "127.0.0.1"},
                                         {"MASTER_PORT", "29500"},
                                         {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                         {"TORCHELASTIC_RESTART_COUNT", "2"}});
  CHECK(info.launcher == Launcher::kTorchrun);
  CHECK(info.rank == 6);
  CHECK(info.world_size == 8);
  CHECK(info.local_rank == 6);
  CHECK(info.master_addr == "127.0.0.1");
  CHECK(info.master_port == 29500);
  CHECK(info.agent_store);
  CHECK(info.restart_count == 2);
}

TEST_CASE("distributed: a bare RANK / WORLD_SIZE environment is read as torchrun's", "[distributed]") {
  const LaunchInfo info = detect_launch(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}});
  CHECK(info.launcher == Launcher::kTorchrun);
  CHECK(info.rank == 1);
  CHECK(info.world_size == 2);
  CHECK(info.master_addr == "node7");
  CHECK(!info.agent_store);
  CHECK(info.restart_count == 0);
  // One process needs no rendezvous address.
  CHECK(detect_launch({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).world_size == 1);
}

TEST_CASE("distributed: the innermost launcher wins", "[distributed]") {
  const Env slurm_batch = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}};
  Env env = slurm_batch;  // mpirun inside an sbatch script
  env.insert({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  CHECK(detect_launch(env).launcher == Launcher::kMpi);
  CHECK(detect_launch(env).rank == 3);

  env = slurm_batch;  // mpiexec.hydra (PMI) inside an sbatch script
  env.insert({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}});
  CHECK(detect_launch(env).launcher == Launcher::kPmi);

  env = slurm_batch;  // srun torchrun ...: torchrun spawned us
  env.insert({{"TORCHELASTIC_RUN_ID", "job"}, {"RANK", "5"}, {"WORLD_SIZE", "8"},
              {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "29500"}});
  CHECK(detect_launch(env).launcher == Launcher::kTorchrun);
  CHECK(detect_launch(env).rank == 5);
}

TEST_CASE("distributed: malformed values name the variable", "[distributed]") {
  const Env ompi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
  auto with = [](Env env, const std::string& key, const std::string& value) {
    env[key] = value;
    return env;
  };
  for (const char* bad : {"x1", "1x", "", " 1", "1.5", "99999999999"})
    CHECK_THROWS_WITH(detect_launch(with(ompi, "OMPI_COMM_WORLD_RANK", bad)),
                      "launch environment: OMPI_COMM_WORLD_RANK=\"" + std::string(bad) + "\" is not an integer");
  CHECK_THROWS_WITH(detect_launch(with(ompi, "OMPI_COMM_WORLD_RANK", "-1")),
                    Contains("OMPI_COMM_WORLD_RANK=\"-1\" must be at least 0"));
  CHECK_THROWS_WITH(detect_launch(with(ompi, "OMPI_COMM_WORLD_RANK", "4")),
                    Contains("OMPI_COMM_WORLD_RANK=\"4\" must be below OMPI_COMM_WORLD_SIZE=4"));
  CHECK_THROWS_WITH(detect_launch(with(ompi, "OMPI_COMM_WORLD_SIZE", "0")),
                    Contains("OMPI_COMM_WORLD_SIZE=\"0\" must be at least 1"));
  CHECK_THROWS_WITH(detect_launch(with(ompi, "OMPI_COMM_WORLD_LOCAL_RANK", "abc")),
                    Contains("OMPI_COMM_WORLD_LOCAL_RANK"));
  CHECK_THROWS_WITH(detect_launch({{"OMPI_COMM_WORLD_RANK", "0"}}), Contains("OMPI_COMM_WORLD_SIZE is not set"));
  CHECK_THROWS_WITH(detect_launch({{"PMI_SIZE", "2"}}), Contains("PMI_RANK is not set"));
  CHECK_THROWS_WITH(detect_launch({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}}),
                    Contains("SLURM_PROCID=\"2\" must be below SLURM_NTASKS=2"));
  CHECK_THROWS_WITH(detect_launch({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}}), Contains("SLURM_NTASKS"));

  const Env torchrun = {{"TORCHELASTIC_RUN_ID", "r"}, {"RANK", "0"}, {"WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "29500"}};
  CHECK_NOTHROW(detect_launch(torchrun));
  CHECK_THROWS_WITH(detect_launch(with(torchrun, "MASTER_PORT", "70000")),
                    Contains("MASTER_PORT=\"70000\" is not a TCP port"));
  CHECK_THROWS_WITH(detect_launch(with(torchrun, "MASTER_PORT", "http")), Contains("MASTER_PORT"));
  CHECK_THROWS_WITH(detect_launch(with(torchrun, "MASTER_ADDR", "")), Contains("MASTER_ADDR is not set"));
  CHECK_THROWS_WITH(detect_launch(with(torchrun, "TORCHELASTIC_USE_AGENT_STORE", "maybe")),
                    Contains("TORCHELASTIC_USE_AGENT_STORE=\"maybe\" is not a boolean"));
  CHECK_THROWS_WITH(detect_launch(with(torchrun, "TORCHELASTIC_RESTART_COUNT", "-3")),
                    Contains("TORCHELASTIC_RESTART_COUNT"));
  CHECK_THROWS_WITH(detect_launch(with(torchrun, "LOCAL_RANK", "9")), Contains("LOCAL_RANK=\"9\" must be below"));
  Env no_rank = torchrun;
  no_rank.erase("RANK");
  CHECK_THROWS_WITH(detect_launch(no_rank), Contains("RANK is not set"));
  CHECK_THROWS_AS(detect_launch(with(torchrun, "WORLD_SIZE", "")), std::invalid_argument);
}

TEST_CASE("distributed: the real environment is read into the map", "[distributed]") {
  setenv("PICOTRON_TEST_VARIABLE", "a=b", /*overwrite=*/1);
  CHECK(process_environment().at("PICOTRON_TEST_VARIABLE") == "a=b");  // split at the first '='
}

TEST_CASE("distributed: CPU under a multi-process torchrun is refused with a clear error", "[distributed]") {
  LaunchInfo info;
  info.launcher = Launcher::kTorchrun;
  info.rank = 0;
  info.world_size = 2;
  Distributed dist(info);  // torchrun with 2 processes: MPI is not started
  CHECK(!dist.has_mpi());
  CHECK_THROWS_WITH(Comm::world(dist, torch::kCPU, std::chrono::seconds(5)),
                    "[rank 0] --device cpu with 2 ranks: CPU runs need mpirun (or srun): torchrun provides no MPI");
}
