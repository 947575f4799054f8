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
//     [layer 0, attention, forward] g: each rank's partial result, summed over tp
//     all_reduce sum over tp {0,1}: [2, 32, 64] fp64, 4,096 elements
//         at tensor_parallel/tensor_parallel.cpp:40 (forward):  tp->all_reduce(y, ReduceOp::kSum, carries("g: ..."));
//
// Each communication is titled with what it carries, composed by runtime/observe/comm_title.h
// from what the step already knows (picotron/step_place.h: the layer, the part, forward or
// backward; a pipeline message's micro-batch and stages) and the words its call site declares
// (CallSite::carries). No technique builds this text.
//
// How: the narrator listens at Comm's one seam (picotron/comm_listener.h) to the world and
// every group split from it, with their members' world ranks. It only appends a line; the
// lines travel to rank 0 after the step (MPI_COMM_WORLD, outside every ledger). So the run's
// numbers are those of the same run without --explain (tests/cmake/equivalence_tests.cmake:
// equivalence.explain_*).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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
std::string describe_event(const CommGroup& group, const CommEvent& event);

class Explainer {
 public:
  // Off (cfg.explain false): every call does nothing. On: listens to the world and every
  // group split from it (those split later too).
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
  int64_t step_ = 0;
  struct Narrator;  // the listener (explain.cpp): the step's lines, under its own mutex
  std::shared_ptr<Narrator> narrator_;
};

}  // namespace picotron
