// picotron/mesh.cpp — the 4D grid [dp][pp][cp][tp]: rank arithmetic and its communicators.
//
// A rank is a number written in a mixed radix whose digits are its coordinates,
// tp being the fastest-moving digit:
//
//   rank = ((dp_i * pp + pp_i) * cp + cp_i) * tp + tp_i
//
//   coords_of peels the digits off again:   tp_i = rank % tp,       rank /= tp
//                                           cp_i = rank % cp,       rank /= cp
//                                           pp_i = rank % pp,       dp_i = rank / pp
//
// The group of `rank` along axis X holds the ranks whose other three digits equal
// its own: walk X's digit from 0 to size(X)-1. Communicators come from
// world.split(color, key) with color = the index of the group (its other digits as
// one number) and key = the world rank, so group rank i is the member with X-digit i.
// That is also why a ring neighbour's group rank is just its coordinate +-1 (mod size).
//
// Each group's Comm is named after its axis; comm_report() prints every group's ledger.
//
// Test: ctest -R mesh   (tests/unit/test_mesh.cpp: every factorisation of 1..8 ranks;
//                        tests/mpi/comm_test.cpp: the communicators, under mpirun)
#include "picotron/mesh.h"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace picotron {

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
    case Axis::kCp: return "cp";
    case Axis::kTp: return "tp";
  }
  return "?";
}

namespace {

int extent(const MeshShape& s, Axis a) {
  switch (a) {
    case Axis::kDp: return s.dp;
    case Axis::kPp: return s.pp;
    case Axis::kCp: return s.cp;
    default: return s.tp;
  }
}

int& digit(MeshCoords& c, Axis a) {
  switch (a) {
    case Axis::kDp: return c.dp;
    case Axis::kPp: return c.pp;
    case Axis::kCp: return c.cp;
    default: return c.tp;
  }
}

// Which group along `axis` holds `rank`: its coordinates with `axis`'s digit set to 0,
// re-read as a number in the radix of the other three axes. Same rank order as above.
int group_index(const MeshShape& s, int rank, Axis axis) {
  MeshCoords c = coords_of(s, rank);
  MeshShape others = s;
  digit(c, axis) = 0;
  if (axis == Axis::kDp) others.dp = 1;
  if (axis == Axis::kPp) others.pp = 1;
  if (axis == Axis::kCp) others.cp = 1;
  if (axis == Axis::kTp) others.tp = 1;
  return rank_of(others, c);
}

std::string join(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "}";
}

}  // namespace

// ---- pure rank arithmetic ---------------------------------------------------

int coordinate(const MeshCoords& c, Axis axis) {
  MeshCoords copy = c;
  return digit(copy, axis);
}

MeshCoords coords_of(const MeshShape& s, int rank) {
  MeshCoords c;
  c.tp = rank % s.tp;
  rank /= s.tp;
  c.cp = rank % s.cp;
  rank /= s.cp;
  c.pp = rank % s.pp;
  c.dp = rank / s.pp;
  return c;
}

int rank_of(const MeshShape& s, const MeshCoords& c) { return ((c.dp * s.pp + c.pp) * s.cp + c.cp) * s.tp + c.tp; }

std::vector<int> group_members(const MeshShape& s, int rank, Axis axis) {
  MeshCoords c = coords_of(s, rank);
  std::vector<int> members;
  for (digit(c, axis) = 0; digit(c, axis) < extent(s, axis); ++digit(c, axis)) members.push_back(rank_of(s, c));
  return members;  // ascending: rank_of grows with every digit
}

std::vector<int> cp_dp_group_members(const MeshShape& s, int rank) {
  MeshCoords c = coords_of(s, rank);
  std::vector<int> members;
  for (c.dp = 0; c.dp < s.dp; ++c.dp)
    for (c.cp = 0; c.cp < s.cp; ++c.cp) members.push_back(rank_of(s, c));  // ascending: dp is the slower digit
  return members;
}

int next_rank(const MeshShape& s, int rank, Axis axis) {
  MeshCoords c = coords_of(s, rank);
  digit(c, axis) = (digit(c, axis) + 1) % extent(s, axis);
  return rank_of(s, c);
}

int prev_rank(const MeshShape& s, int rank, Axis axis) {
  MeshCoords c = coords_of(s, rank);
  digit(c, axis) = (digit(c, axis) + extent(s, axis) - 1) % extent(s, axis);
  return rank_of(s, c);
}

// Within a group along `axis`, a member's group rank is its coordinate on that axis.
int next_in_group(const MeshShape& s, int rank, Axis axis) {
  MeshCoords c = coords_of(s, rank);
  return (digit(c, axis) + 1) % extent(s, axis);
}

int prev_in_group(const MeshShape& s, int rank, Axis axis) {
  MeshCoords c = coords_of(s, rank);
  return (digit(c, axis) + extent(s, axis) - 1) % extent(s, axis);
}

void check_mesh(const MeshShape& s, int world_size) {
  for (Axis a : {Axis::kDp, Axis::kPp, Axis::kCp, Axis::kTp})
    if (extent(s, a) < 1)
      throw std::invalid_argument(std::string("--") + axis_name(a) + " must be at least 1, got " +
                                  std::to_string(extent(s, a)));
  if (s.world_size() != world_size)
    throw std::invalid_argument("--dp " + std::to_string(s.dp) + " x --pp " + std::to_string(s.pp) + " x --cp " +
                                std::to_string(s.cp) + " x --tp " + std::to_string(s.tp) + " = " +
                                std::to_string(s.world_size()) + " ranks, but the job has " +
                                std::to_string(world_size) + " processes (world size)");
}

std::string describe_mesh(const MeshShape& s) {
  std::ostringstream out;
  out << "mesh: dp " << s.dp << " x pp " << s.pp << " x cp " << s.cp << " x tp " << s.tp << " = " << s.world_size()
      << " ranks   (rank = ((dp_i*pp + pp_i)*cp + cp_i)*tp + tp_i)\n";
  // The grid: a row per dp index, a column per pp stage. A cell lists its ranks along
  // tp, one block per cp index, blocks separated by '|':  [0 1 | 2 3] is cp 0, cp 1.
  std::vector<std::vector<std::string>> cells(s.dp, std::vector<std::string>(s.pp));
  size_t width = 4;
  for (int d = 0; d < s.dp; ++d)
    for (int p = 0; p < s.pp; ++p) {
      std::string& cell = cells[d][p];
      for (int c = 0; c < s.cp; ++c)
        for (int t = 0; t < s.tp; ++t)
          cell += (c > 0 && t == 0 ? " | " : (t > 0 ? " " : "")) + std::to_string(rank_of(s, {d, p, c, t}));
      cell = "[" + cell + "]";
      width = std::max(width, cell.size());
    }
  auto row = [&](const std::string& label, auto cell_text) {  // columns padded to one width
    out << std::left << std::setw(8) << label;
    for (int p = 0; p < s.pp; ++p) out << std::setw(p + 1 < s.pp ? int(width) + 3 : 0) << cell_text(p);
    out << "\n";
  };
  row("", [](int p) { return "pp " + std::to_string(p); });
  for (int d = 0; d < s.dp; ++d) row("dp " + std::to_string(d), [&](int p) { return cells[d][p]; });
  // Every group of every axis, listed once (by its first member); long lists are cut.
  constexpr int kMaxGroupsShown = 16;
  auto list_groups = [&](const char* name, auto members_of) {
    out << name << " groups:";
    int shown = 0, total = 0;
    for (int r = 0; r < s.world_size(); ++r) {
      std::vector<int> m = members_of(r);
      if (m.front() != r) continue;  // not the first member: already listed
      if (total++ < kMaxGroupsShown) out << " " << join(m), ++shown;
    }
    if (shown < total) out << " ... (" << total << " groups)";
    out << "\n";
  };
  for (Axis a : {Axis::kTp, Axis::kCp, Axis::kPp, Axis::kDp})
    list_groups(axis_name(a), [&](int r) { return group_members(s, r, a); });
  list_groups("cp x dp", [&](int r) { return cp_dp_group_members(s, r); });
  return out.str();
}

// ---- communicators ----------------------------------------------------------

Mesh::Mesh(Comm& world, const MeshShape& shape) : world_(world), shape_(shape) {
  check_mesh(shape_, world_.size());
  const int rank = world_.rank();
  coords_ = coords_of(shape_, rank);
  // Every rank calls split() five times in the same order: each call is collective.
  tp_ = world_.split(/*color=*/group_index(shape_, rank, Axis::kTp), /*key=*/rank, "tp");
  cp_ = world_.split(/*color=*/group_index(shape_, rank, Axis::kCp), /*key=*/rank, "cp");
  pp_ = world_.split(/*color=*/group_index(shape_, rank, Axis::kPp), /*key=*/rank, "pp");
  dp_ = world_.split(/*color=*/group_index(shape_, rank, Axis::kDp), /*key=*/rank, "dp");
  // cp x dp: the ranks sharing (pp_i, tp_i); the group's index is pp_i * tp + tp_i.
  cp_dp_ = world_.split(/*color=*/coords_.pp * shape_.tp + coords_.tp, /*key=*/rank, "cp_dp");

  // The group rank is the coordinate along the axis (key = world rank keeps the order).
  if (tp_.rank() != coords_.tp || cp_.rank() != coords_.cp || pp_.rank() != coords_.pp || dp_.rank() != coords_.dp ||
      cp_dp_.rank() != coords_.dp * shape_.cp + coords_.cp)
    throw CommError("[rank " + std::to_string(rank) + "] Mesh: a split communicator disagrees with the grid");
}

}  // namespace picotron
