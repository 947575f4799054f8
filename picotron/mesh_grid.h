// picotron/mesh_grid.h — the 4D grid [dp][pp][cp][tp] as pure arithmetic: axes, shapes,
// coordinates, groups and neighbours. No communicators, no MPI, no tensors: shard
// records and plans (picotron/shard.h) use it too. The picture and the formulas are in
// picotron/mesh.h; the implementation in picotron/mesh.cpp.
//
// Test: ctest -R mesh   (tests/unit/test_mesh.cpp: every factorisation of 1..8 ranks)
#pragma once

#include <string>
#include <vector>

namespace picotron {

enum class Axis { kDp, kPp, kCp, kTp };
const char* axis_name(Axis a);

struct MeshShape {
  int dp = 1, pp = 1, cp = 1, tp = 1;
  int world_size() const { return dp * pp * cp * tp; }
};

struct MeshCoords {
  int dp = 0, pp = 0, cp = 0, tp = 0;
};

// ---- pure rank arithmetic ---------------------------------------------------
MeshCoords coords_of(const MeshShape& shape, int rank);
int rank_of(const MeshShape& shape, const MeshCoords& c);
// Members (global ranks, ascending) of `rank`'s group along `axis`.
std::vector<int> group_members(const MeshShape& shape, int rank, Axis axis);
// Members of `rank`'s cp×dp group (all ranks sharing its pp and tp coordinates).
std::vector<int> cp_dp_group_members(const MeshShape& shape, int rank);
// Ring neighbours along `axis` (wrapping): the GLOBAL rank of the next / previous member.
int next_rank(const MeshShape& shape, int rank, Axis axis);
int prev_rank(const MeshShape& shape, int rank, Axis axis);
// The same neighbours as ranks WITHIN the group along `axis` (0 .. size(axis)-1): the
// `peer` to pass to that group's Comm. For dp 2 x pp 2 x cp 2 x tp 2, global rank 5 is
// (dp 0, pp 1, cp 0, tp 1): its pp neighbours are group rank 0 (global 1) both ways,
// its cp next is group rank 1 (global 7).
int next_in_group(const MeshShape& shape, int rank, Axis axis);
int prev_in_group(const MeshShape& shape, int rank, Axis axis);
// Throws std::invalid_argument with one line naming the flags and the numbers if
// dp*pp*cp*tp != world_size or any size is < 1:
//   "--dp 2 x --pp 2 x --cp 1 x --tp 3 = 12 ranks, but the job has 8 processes (world size)"
void check_mesh(const MeshShape& shape, int world_size);
// Human-readable grid and every group's members (printed by rank 0 at start).
std::string describe_mesh(const MeshShape& shape);

// The coordinate of `c` on `axis`.
int coordinate(const MeshCoords& c, Axis axis);

}  // namespace picotron
