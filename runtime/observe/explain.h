// runtime/observe/explain.h — --explain: the first training step, narrated rank by rank.
//
//   mpirun -np 4 build/train --device cpu --tp 2 --dp 2 --steps 1 --explain
//
// prints, on rank 0, what every rank holds (its layers, attention heads, MLP columns,
// vocabulary rows, sequence positions, data shard, ZeRO slice), then every rank's
// communications of the step in the order it issued them, with the phase of the step
// they belong to:
//
//   ---- rank 1 (dp 0, pp 0, cp 0, tp 1) ----
//   micro-batch 1 of 1: forward
//     [layer 0, attention] forward out of o_proj: the partial outputs (g)
//     all_reduce sum over tp {0,1}: [2, 32, 64] fp64, 4,096 elements
//         at tensor_parallel/tensor_parallel.cpp:45 (forward):  return all_reduced(x, *tp);
//
// A technique titles its communications with Comm::note (its layer and block, forward or
// backward; a pipeline message's kind and micro-batch), printed above the first
// communication after it.
//
// How: every Comm of the mesh calls an observer with each communication it records in
// its ledger (picotron/comm.h: CommEvent, with the CALLER's file and line filled in by
// the compiler). The observer only appends a line; the lines travel to rank 0 after the
// step (MPI_COMM_WORLD, outside every ledger). So the run's numbers are those of the
// same run without --explain (tests/equivalence_tests.cmake: equivalence.explain_*).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cli/train_config.h"
#include "picotron/mesh.h"
#include "picotron/shard.h"

namespace picotron {

class Distributed;

// What the rank at `here` holds, one line per kind (pure: the config, the mesh and the plan).
std::vector<std::string> holdings(const TrainConfig& cfg, const MeshShape& shape, const MeshCoords& here,
                                  const ShardPlan& plan);

// One communication as --explain prints it: collective, reduction, group with its world
// ranks, shapes, dtype, elements, then "at FILE:LINE (function)" on a second line.
// The sizes of the groups techniques split from the mesh's, to name their world ranks:
// the hybrid's all-to-all group U (cp_a2a, cp_ring); HSDP's shard group and hpZ's group in
// dp ranks (cp_dp_shard, cp_dp_replicas, cp_dp_hpz; 0: none, zero/zero_groups.h).
struct SplitSizes {
  int cp_a2a = 1, zero_shard = 0, zero_hpz = 0;
};
std::string describe_event(const Comm& comm, const CommEvent& event, const MeshShape& shape, int world_rank,
                           const SplitSizes& split = {});

class Explainer {
 public:
  // Off (cfg.explain false): every call does nothing. On: installs the observer on the
  // mesh's groups (and the groups split from them later).
  Explainer(const TrainConfig& cfg, Mesh& mesh, std::function<ShardPlan(const MeshCoords&)> shard_plan_of);
  ~Explainer();
  Explainer(const Explainer&) = delete;
  Explainer& operator=(const Explainer&) = delete;

  bool on() const { return enabled_; }
  void begin(int64_t step);            // start recording this rank's communications
  void phase(const std::string& what);  // a heading: the part of the step that follows
  // Stop recording; rank 0 prints what every rank holds and every rank's narration, in
  // rank order. Collective over the world (every rank calls it after the same step).
  void end(const Distributed& dist);

 private:
  bool enabled_;
  TrainConfig cfg_;
  Mesh& mesh_;
  std::function<ShardPlan(const MeshCoords&)> shard_plan_of_;
  SplitSizes split_;  // the hybrid's U, HSDP's and hpZ's sizes: their groups named by world ranks
  std::mutex mutex_;  // data parallelism's bucket all-reduces are issued from autograd's thread
  bool recording_ = false;
  int64_t step_ = 0;
  std::vector<std::string> lines_;
  std::pair<std::string, std::string> pending_note_;  // (group, the last note): printed above its next communication
};

}  // namespace picotron
