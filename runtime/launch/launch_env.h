// runtime/launch/launch_env.h — how this process learns who it is, from its launcher.
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
// Reading the environment is pure (detect_launch) so it can be unit-tested; the step's
// Distributed (picotron/distributed.h) applies the answer (MPI_Init, the GPU).
// Malformed values throw std::invalid_argument with one line naming the variable.
//
// Test: ctest -R distributed
#pragma once

#include <map>
#include <string>

#include "picotron/distributed.h"

namespace picotron {

// Pure: reads only the given environment (tests pass a map; main passes the real one).
LaunchInfo detect_launch(const std::map<std::string, std::string>& env);
// The real process environment as a map.
std::map<std::string, std::string> process_environment();

}  // namespace picotron
