// picotron/mesh.h — the 4D device mesh [dp][pp][cp][tp].
//
// The world's ranks are laid out on a grid with tp varying fastest, so the ranks
// that talk most (tensor parallel, several collectives per layer) are neighbours
// and share a node's fast links:
//
//   rank = ((dp_i * pp + pp_i) * cp + cp_i) * tp + tp_i
//
//   example dp=2 pp=2 cp=1 tp=2 (8 ranks):
//            pp 0        pp 1
//   dp 0   [0 1]       [2 3]        tp groups: {0,1} {2,3} {4,5} {6,7}
//   dp 1   [4 5]       [6 7]        pp groups: {0,2} {1,3} {4,6} {5,7}
//                                   dp groups: {0,4} {1,5} {2,6} {3,7}
//
// A "group along axis X" is the set of ranks that share every coordinate except X.
// cp×dp is the group that shares (pp, tp): gradients are averaged over it (every cp
// rank sees different tokens of the same batch, every dp rank other sequences).
//
// Ring neighbours come in two flavours. next_rank / prev_rank give GLOBAL ranks (to
// print, or to address the world). next_in_group / prev_in_group give the neighbour's
// rank WITHIN the group along the axis (its coordinate on that axis), which is what a
// send on that group's Comm takes: in the example, rank 5 (pp stage 0) sends the next
// stage's input to global rank 7, which is rank 1 of mesh.pp() = {5, 7}.
//
// MeshShape / MeshCoords and the group/neighbour functions are pure arithmetic
// (picotron/mesh_grid.h: no MPI, no tensors), tested without any communication; Mesh builds one Comm per group, names it ("world",
// "tp", "cp", "pp", "dp", "cp_dp") and reports what every group's ledger counted.
//
// Test: ctest -R mesh
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "picotron/comm.h"
#include "picotron/mesh_grid.h"

namespace picotron {

// ---- communicators ----------------------------------------------------------
// Owns one Comm per group that contains this rank. Built collectively: every rank
// of `world` must construct it with the same shape.
class Mesh {
 public:
  Mesh(Comm& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoords& coords() const { return coords_; }
  int rank() const { return world_.rank(); }

  Comm& world() { return world_; }
  Comm& tp() { return tp_; }
  Comm& cp() { return cp_; }
  Comm& pp() { return pp_; }
  Comm& dp() { return dp_; }
  Comm& cp_dp() { return cp_dp_; }

  bool is_first_stage() const { return coords_.pp == 0; }             // holds the embedding
  bool is_last_stage() const { return coords_.pp == shape_.pp - 1; }  // holds the head and loss

  // ---- the ledger of every group the run made (picotron/comm_listener.h) -------------
  // The mesh's groups and those techniques split from them (the pipeline's embedding group,
  // the hybrid's cp_a2a and cp_ring, HSDP's and hpZ's, the experts'): all report to the
  // world's listeners, so nothing needs listing here.
  void reset_ledgers() { world_.listeners()->reset_ledgers(); }
  // A table with one row per (group, kind) called since the last reset (CommListeners::report).
  std::string comm_report(int64_t steps) const { return world_.listeners()->report(world_.rank(), steps); }

 private:
  Comm& world_;
  MeshShape shape_;
  MeshCoords coords_;
  Comm tp_, cp_, pp_, dp_, cp_dp_;
};

}  // namespace picotron
