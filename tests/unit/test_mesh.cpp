// tests/unit/test_mesh.cpp — the 4D grid's rank arithmetic, with no communication at all.
//
// For every factorisation of 1..8 ranks into dp x pp x cp x tp, each function of
// picotron/mesh.h is compared with a brute-force reference built here from the layout's
// definition alone ("tp varies fastest, then cp, then pp, then dp"): enumerate the grid
// in nested loops and number the cells 0, 1, 2, ... A group along an axis is then "every
// rank whose other three coordinates are equal", found by scanning all ranks.
//
// The communicators built from these groups are tested under mpirun in comm_test.cpp.
//
// Test: ctest -R mesh   (or: build/tests/unit_tests "[mesh]")
#include <algorithm>

// Our headers (which pull in LibTorch) come before Catch: c10 defines a CHECK macro of
// its own, and Catch's must be the one that wins.
#include "picotron/mesh.h"

#include <catch2/catch.hpp>

using namespace picotron;

namespace {

// Every (dp, pp, cp, tp) with dp*pp*cp*tp == world.
std::vector<MeshShape> factorisations(int world) {
  std::vector<MeshShape> shapes;
  for (int dp = 1; dp <= world; ++dp)
    for (int pp = 1; pp <= world; ++pp)
      for (int cp = 1; cp <= world; ++cp)
        for (int tp = 1; tp <= world; ++tp)
          if (dp * pp * cp * tp == world) shapes.push_back({dp, pp, cp, tp});
  return shapes;
}

std::vector<MeshShape> all_shapes_up_to_8() {
  std::vector<MeshShape> all;
  for (int world = 1; world <= 8; ++world)
    for (const MeshShape& s : factorisations(world)) all.push_back(s);
  return all;
}

// Coordinates of every rank, by enumeration (never by division).
std::vector<MeshCoords> enumerate(const MeshShape& s) {
  std::vector<MeshCoords> coords;
  for (int d = 0; d < s.dp; ++d)
    for (int p = 0; p < s.pp; ++p)
      for (int c = 0; c < s.cp; ++c)
        for (int t = 0; t < s.tp; ++t) coords.push_back({d, p, c, t});
  return coords;
}

int coord(const MeshCoords& c, Axis a) {
  return a == Axis::kDp ? c.dp : a == Axis::kPp ? c.pp : a == Axis::kCp ? c.cp : c.tp;
}

// All ranks q whose coordinates equal rank r's on every axis `fixed` says, ascending.
template <class Fixed>
std::vector<int> brute_force_group(const std::vector<MeshCoords>& coords, int r, Fixed fixed) {
  std::vector<int> members;
  for (int q = 0; q < int(coords.size()); ++q) {
    bool same = true;
    for (Axis a : {Axis::kDp, Axis::kPp, Axis::kCp, Axis::kTp})
      if (fixed(a) && coord(coords[q], a) != coord(coords[r], a)) same = false;
    if (same) members.push_back(q);
  }
  return members;
}

std::string name(const MeshShape& s) {
  return "dp " + std::to_string(s.dp) + " pp " + std::to_string(s.pp) + " cp " + std::to_string(s.cp) + " tp " +
         std::to_string(s.tp);
}

const Axis kAxes[] = {Axis::kDp, Axis::kPp, Axis::kCp, Axis::kTp};

}  // namespace

TEST_CASE("mesh: there are 1+4+4+10+4+16+4+20 factorisations of 1..8 ranks", "[mesh]") {
  // The number of ordered ways to write w as a product of 4 factors.
  const int expected[] = {1, 4, 4, 10, 4, 16, 4, 20};
  for (int world = 1; world <= 8; ++world) CHECK(factorisations(world).size() == size_t(expected[world - 1]));
}

TEST_CASE("mesh: coords_of and rank_of match the enumeration and invert each other", "[mesh]") {
  for (const MeshShape& s : all_shapes_up_to_8()) {
    INFO(name(s));
    const std::vector<MeshCoords> coords = enumerate(s);
    for (int r = 0; r < s.world_size(); ++r) {
      const MeshCoords c = coords_of(s, r);
      CHECK(c.dp == coords[r].dp);
      CHECK(c.pp == coords[r].pp);
      CHECK(c.cp == coords[r].cp);
      CHECK(c.tp == coords[r].tp);
      CHECK(rank_of(s, c) == r);
    }
  }
}

TEST_CASE("mesh: group members along each axis match brute force", "[mesh]") {
  for (const MeshShape& s : all_shapes_up_to_8()) {
    const std::vector<MeshCoords> coords = enumerate(s);
    for (Axis axis : kAxes)
      for (int r = 0; r < s.world_size(); ++r) {
        INFO(name(s) << ", axis " << axis_name(axis) << ", rank " << r);
        const std::vector<int> expected = brute_force_group(coords, r, [&](Axis a) { return a != axis; });
        CHECK(group_members(s, r, axis) == expected);
        // The group rank is the coordinate along the axis (Mesh relies on it).
        CHECK(expected[coord(coords[r], axis)] == r);
      }
  }
}

TEST_CASE("mesh: ring neighbours are the next and previous group members, wrapping", "[mesh]") {
  for (const MeshShape& s : all_shapes_up_to_8()) {
    const std::vector<MeshCoords> coords = enumerate(s);
    for (Axis axis : kAxes)
      for (int r = 0; r < s.world_size(); ++r) {
        INFO(name(s) << ", axis " << axis_name(axis) << ", rank " << r);
        const std::vector<int> g = brute_force_group(coords, r, [&](Axis a) { return a != axis; });
        const int n = int(g.size());
        const int i = int(std::find(g.begin(), g.end(), r) - g.begin());
        CHECK(next_rank(s, r, axis) == g[(i + 1) % n]);
        CHECK(prev_rank(s, r, axis) == g[(i + n - 1) % n]);
        CHECK(prev_rank(s, next_rank(s, r, axis), axis) == r);
      }
  }
}

TEST_CASE("mesh: group-relative neighbours index the group's members", "[mesh]") {
  // next_in_group is the peer a send on the group's Comm takes; the member it names must
  // be the global next_rank. (Group rank i is the i-th member, ascending: see above.)
  for (const MeshShape& s : all_shapes_up_to_8()) {
    const std::vector<MeshCoords> coords = enumerate(s);
    for (Axis axis : kAxes)
      for (int r = 0; r < s.world_size(); ++r) {
        INFO(name(s) << ", axis " << axis_name(axis) << ", rank " << r);
        const std::vector<int> g = brute_force_group(coords, r, [&](Axis a) { return a != axis; });
        const int next = next_in_group(s, r, axis), prev = prev_in_group(s, r, axis);
        REQUIRE(next >= 0);
        REQUIRE(next < int(g.size()));
        REQUIRE(prev >= 0);
        REQUIRE(prev < int(g.size()));
        CHECK(g[next] == next_rank(s, r, axis));
        CHECK(g[prev] == prev_rank(s, r, axis));
        CHECK(prev_in_group(s, g[next], axis) == coord(coords[r], axis));  // and back again
      }
  }
}

TEST_CASE("mesh: group-relative neighbours are not global ranks (dp 2 pp 2 cp 2 tp 2)", "[mesh]") {
  // Rank 5 = (dp 0, pp 1, cp 0, tp 1). Its pp group is {1, 5}: both pp neighbours are
  // global rank 1 = group rank 0. Its cp group is {5, 7}: cp next is global 7 = group
  // rank 1. Returning global ranks (1, 7) would address ranks a 2-member group lacks.
  const MeshShape s{2, 2, 2, 2};
  CHECK(group_members(s, 5, Axis::kPp) == std::vector<int>{1, 5});
  CHECK(group_members(s, 5, Axis::kCp) == std::vector<int>{5, 7});
  CHECK(next_rank(s, 5, Axis::kPp) == 1);
  CHECK(next_in_group(s, 5, Axis::kPp) == 0);
  CHECK(prev_in_group(s, 5, Axis::kPp) == 0);
  CHECK(next_rank(s, 5, Axis::kCp) == 7);
  CHECK(next_in_group(s, 5, Axis::kCp) == 1);
  CHECK(prev_in_group(s, 5, Axis::kCp) == 1);
  // Rank 12 = (dp 1, pp 1, cp 0, tp 0): pp group {8, 12}, cp group {12, 14}.
  CHECK(next_in_group(s, 12, Axis::kPp) == 0);  // global 8
  CHECK(next_in_group(s, 12, Axis::kCp) == 1);  // global 14
  // A 4-stage pipeline next to dp 2: rank 5 = (dp 1, pp 1); next stage global 6, group rank 2.
  const MeshShape pipe{2, 4, 1, 1};
  CHECK(next_rank(pipe, 5, Axis::kPp) == 6);
  CHECK(next_in_group(pipe, 5, Axis::kPp) == 2);
  CHECK(prev_in_group(pipe, 5, Axis::kPp) == 0);
  CHECK(prev_in_group(pipe, 4, Axis::kPp) == 3);  // the first stage's previous wraps to the last
}

TEST_CASE("mesh: the cp x dp group holds every rank sharing pp and tp", "[mesh]") {
  for (const MeshShape& s : all_shapes_up_to_8()) {
    const std::vector<MeshCoords> coords = enumerate(s);
    for (int r = 0; r < s.world_size(); ++r) {
      INFO(name(s) << ", rank " << r);
      const std::vector<int> expected =
          brute_force_group(coords, r, [](Axis a) { return a == Axis::kPp || a == Axis::kTp; });
      CHECK(cp_dp_group_members(s, r) == expected);
      CHECK(int(expected.size()) == s.dp * s.cp);
    }
  }
}

TEST_CASE("mesh: the groups of an axis partition the world", "[mesh]") {
  for (const MeshShape& s : all_shapes_up_to_8())
    for (Axis axis : kAxes) {
      INFO(name(s) << ", axis " << axis_name(axis));
      std::vector<int> times_seen(s.world_size(), 0);
      for (int r = 0; r < s.world_size(); ++r) {
        const std::vector<int> g = group_members(s, r, axis);
        if (g.front() == r)  // count each group once
          for (int q : g) ++times_seen[q];
      }
      CHECK(times_seen == std::vector<int>(s.world_size(), 1));
    }
}

TEST_CASE("mesh: the 8-rank example of mesh.h", "[mesh]") {
  const MeshShape s{2, 2, 1, 2};
  CHECK(group_members(s, 5, Axis::kTp) == std::vector<int>{4, 5});
  CHECK(group_members(s, 5, Axis::kPp) == std::vector<int>{5, 7});
  CHECK(group_members(s, 5, Axis::kDp) == std::vector<int>{1, 5});
  CHECK(group_members(s, 5, Axis::kCp) == std::vector<int>{5});
  CHECK(cp_dp_group_members(s, 5) == std::vector<int>{1, 5});
  const std::string text = describe_mesh(s);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("tp groups: {0,1} {2,3} {4,5} {6,7}"));
  CHECK_THAT(text, Catch::Contains("pp groups: {0,2} {1,3} {4,6} {5,7}"));
  CHECK_THAT(text, Catch::Contains("dp groups: {0,4} {1,5} {2,6} {3,7}"));
  CHECK_THAT(text, Catch::Contains("[4 5]"));
  CHECK_THAT(describe_mesh({1, 1, 2, 2}), Catch::Contains("[0 1 | 2 3]"));  // cp blocks
}

TEST_CASE("mesh: describe_mesh cuts long group lists", "[mesh]") {
  const std::string text = describe_mesh({64, 1, 1, 1});
  CHECK_THAT(text, Catch::Contains("tp groups: {0} {1}"));
  CHECK_THAT(text, Catch::Contains("... (64 groups)"));
}

TEST_CASE("mesh: check_mesh names the flags and the numbers", "[mesh]") {
  CHECK_NOTHROW(check_mesh({2, 2, 1, 2}, 8));
  CHECK_THROWS_WITH(check_mesh({2, 2, 1, 3}, 8),
                    "--dp 2 x --pp 2 x --cp 1 x --tp 3 = 12 ranks, but the job has 8 processes (world size)");
  CHECK_THROWS_WITH(check_mesh({2, 1, 1, 1}, 1),
                    Catch::Contains("--dp 2 x --pp 1 x --cp 1 x --tp 1 = 2 ranks, but the job has 1 processes"));
  CHECK_THROWS_WITH(check_mesh({1, 1, 0, 1}, 1), "--cp must be at least 1, got 0");
  CHECK_THROWS_WITH(check_mesh({1, -2, 1, 1}, 2), "--pp must be at least 1, got -2");
  CHECK_THROWS_AS(check_mesh({1, 1, 1, 4}, 2), std::invalid_argument);
}
