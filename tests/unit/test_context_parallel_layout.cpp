// Context parallelism without communication: which tokens each rank holds, which blocks
// it computes at each ring step (pure), the causal work per rank, and the block kernel's
// two forms (the CPU flash kernel and the explicit scores) against each other.
#include <catch2/catch.hpp>

#include <set>

#include "context_parallel/context_parallel.h"
#include "context_parallel/ulysses.h"

using namespace picotron;

TEST_CASE("cp layouts: every token on exactly one rank, zigzag pairs chunk i with 2C-1-i", "[cp]") {
  for (CpLayout layout : {CpLayout::kContiguous, CpLayout::kZigzag})
    for (int C : {1, 2, 3, 4}) {
      const int64_t S = 24;
      std::multiset<int64_t> seen;
      for (int r = 0; r < C; ++r) {
        const auto p = cp_positions(S, C, r, layout);
        REQUIRE(int64_t(p.size()) == S / C);
        seen.insert(p.begin(), p.end());
      }
      CHECK(seen.size() == size_t(S));
      for (int64_t t = 0; t < S; ++t) CHECK(seen.count(t) == 1);
    }
  CHECK(cp_positions(16, 4, 1, CpLayout::kZigzag) == std::vector<int64_t>{2, 3, 12, 13});
  CHECK(cp_positions(16, 4, 1, CpLayout::kContiguous) == std::vector<int64_t>{4, 5, 6, 7});
}

TEST_CASE("cp ring blocks: exactly the causal pairs, each once", "[cp]") {
  // Mark every (query, key) pair the blocks of all steps compute, in global positions;
  // they must be exactly the pairs with key <= query, none twice.
  for (CpLayout layout : {CpLayout::kContiguous, CpLayout::kZigzag})
    for (int C : {1, 2, 3, 4}) {
      const int64_t S = 8 * C, n = S / C;
      std::vector<int> hits(size_t(S * S), 0);
      for (int r = 0; r < C; ++r) {
        const auto mine = cp_positions(S, C, r, layout);
        for (int step = 0; step < C; ++step) {
          const auto theirs = cp_positions(S, C, ((r - step) % C + C) % C, layout);
          for (const RingBlock& b : ring_blocks(layout, C, r, step, n))
            for (int64_t i = b.q_first; i < b.q_first + b.q_len; ++i)
              for (int64_t j = b.k_first; j < b.k_first + b.k_len; ++j)
                if (!b.causal || j - b.k_first <= i - b.q_first) ++hits[size_t(mine[i] * S + theirs[j])];
        }
      }
      int wrong = 0;
      for (int64_t q = 0; q < S; ++q)
        for (int64_t k = 0; k < S; ++k) wrong += hits[size_t(q * S + k)] != (k <= q ? 1 : 0);
      INFO(cp_layout_name(layout) << " C=" << C);
      CHECK(wrong == 0);
    }
}

TEST_CASE("cp load balance: zigzag gives every rank the same causal work, contiguous does not", "[cp]") {
  for (int C : {2, 4, 8}) {
    const int64_t n = 64;
    std::set<int64_t> zigzag, contiguous;
    for (int r = 0; r < C; ++r) {
      zigzag.insert(ring_attention_work(CpLayout::kZigzag, C, r, n));
      contiguous.insert(ring_attention_work(CpLayout::kContiguous, C, r, n));
    }
    CHECK(zigzag.size() == 1);
    CHECK(contiguous.size() == size_t(C));  // rank r: r full blocks + the diagonal
  }
  // C = 4, S/C = 64: contiguous 2080 (rank 0) ... 14368 (rank 3); zigzag 8224 each.
  CHECK(ring_attention_work(CpLayout::kContiguous, 4, 0, 64) == 2080);
  CHECK(ring_attention_work(CpLayout::kContiguous, 4, 3, 64) == 2080 + 3 * 4096);
  CHECK(ring_attention_work(CpLayout::kZigzag, 4, 2, 64) == 2080 + 3 * 2048);
}

TEST_CASE("cp: --seq-len must split into the layout's chunks", "[cp]") {
  CHECK(cp_problem(32, 4, CpLayout::kZigzag).empty());
  CHECK(cp_problem(36, 4, CpLayout::kZigzag) ==
        "--seq-len 36 is not divisible by 2 x --cp = 8 (--cp-layout zigzag gives each rank two chunks of S / 2cp)");
  CHECK(cp_problem(36, 4, CpLayout::kContiguous).empty());
  CHECK(cp_problem(30, 4, CpLayout::kContiguous) == "--seq-len 30 is not divisible by --cp 4 (--cp-layout contiguous)");
  CHECK_THROWS_WITH(parse_cp_layout("ring"), "--cp-layout must be contiguous or zigzag, got 'ring'");
}

TEST_CASE("ulysses order: an all-to-all group's tokens are exactly its ring rank's, in the ring's order", "[cp]") {
  for (CpLayout layout : {CpLayout::kContiguous, CpLayout::kZigzag})
    for (int C : {2, 4, 8})
      for (int U = 2; U <= C; U *= 2) {
        const int64_t S = 4 * C;
        for (int rank = 0; rank < C; ++rank) {
          std::vector<int64_t> gathered;  // the group's tokens in rank order
          const int first = cp_ring_rank(rank, U) * U;
          for (int u = 0; u < U; ++u)
            for (int64_t p : cp_positions(S, C, first + u, layout)) gathered.push_back(p);
          const auto order = ulysses_order(S, C, U, rank, layout);
          const auto ring = cp_positions(S, C / U, cp_ring_rank(rank, U), layout);
          REQUIRE(order.size() == ring.size());
          REQUIRE(std::set<int64_t>(order.begin(), order.end()).size() == order.size());  // a permutation
          for (size_t j = 0; j < order.size(); ++j) REQUIRE(gathered[order[j]] == ring[j]);
          if (U == C)  // pure Ulysses: the natural order 0 .. S-1
            for (size_t j = 0; j < order.size(); ++j) REQUIRE(ring[j] == int64_t(j));
        }
      }
}

TEST_CASE("cp modes: heads must split over the all-to-all group, --cp-ulysses only with hybrid", "[cp]") {
  CHECK(cp_mode_problem(CpMode::kRing, 4, 0, 3).empty());
  CHECK(cp_mode_problem(CpMode::kUlysses, 4, 0, 8).empty());
  CHECK(cp_mode_problem(CpMode::kHybrid, 4, 2, 2).empty());
  CHECK(cp_mode_problem(CpMode::kUlysses, 4, 0, 6) ==
        "--cp-mode ulysses: the 6 attention heads per tp rank (--num-attention-heads / --tp) are not divisible by "
        "the all-to-all group 4 (--cp 4): use --cp-mode ring, or a group dividing them");
  CHECK(cp_mode_problem(CpMode::kHybrid, 4, 4, 8).find("1 < U < --cp 4") != std::string::npos);
  CHECK(cp_mode_problem(CpMode::kRing, 4, 2, 8).find("--cp-ulysses 2 sets") == 0);
  CHECK(cp_ulysses_size(CpMode::kRing, 4, 0) == 1);
  CHECK(cp_ulysses_size(CpMode::kUlysses, 4, 0) == 4);
  CHECK(cp_ulysses_size(CpMode::kHybrid, 4, 2) == 2);
  CHECK_THROWS_WITH(parse_cp_mode("star"), "--cp-mode must be ring, ulysses or hybrid, got 'star'");
}

TEST_CASE("hybrid groups: all-to-alls of U consecutive cp ranks, rings of every U-th; as world ranks", "[cp]") {
  CHECK(cp_a2a_members(/*U=*/2, /*rank=*/3) == std::vector<int>{2, 3});
  CHECK(cp_ring_members(/*C=*/4, /*U=*/2, /*rank=*/3) == std::vector<int>{1, 3});
  CHECK(cp_ring_members(/*C=*/8, /*U=*/2, /*rank=*/2) == std::vector<int>{0, 2, 4, 6});
  // dp 1 x pp 1 x cp 4 x tp 2: cp rank c of tp rank t is world rank 2c + t.
  const std::string text = cp_groups_text({CpLayout::kZigzag, CpMode::kHybrid, 2}, MeshShape{1, 1, 4, 2});
  CHECK(text == "cp all-to-all groups (cp_a2a, 2 ranks): [0 2] [1 3] [4 6] [5 7]\n"
                "cp rings (cp_ring, 2 ranks): [0 4] [1 5] [2 6] [3 7]");
  CHECK(cp_groups_text({CpLayout::kZigzag, CpMode::kUlysses, 0}, MeshShape{1, 1, 4, 1}).empty());
}

TEST_CASE("attention block: the CPU flash kernel and the explicit scores agree, forward and backward", "[cp]") {
  torch::manual_seed(3);
  const auto f64 = torch::dtype(torch::kFloat64);
  for (bool causal : {true, false})
    for (int64_t kv_heads : {2, 4}) {
      const int64_t sk = causal ? 6 : 9;  // a full block may be wider than tall
      const auto q = torch::randn({2, 4, 6, 8}, f64) * 5, k = torch::randn({2, kv_heads, sk, 8}, f64),
                 v = torch::randn({2, kv_heads, sk, 8}, f64), dout = torch::randn({2, 4, 6, 8}, f64);
      const auto flash = attention_block(q, k, v, causal), expl = attention_block(q, k, v, causal, true);
      CHECK(torch::allclose(flash.out, expl.out, 1e-12, 1e-12));
      CHECK(torch::allclose(flash.lse, expl.lse, 1e-12, 1e-12));
      const auto [dq1, dk1, dv1] = attention_block_backward(dout, q, k, v, flash.out, flash.lse, causal);
      const auto [dq2, dk2, dv2] = attention_block_backward(dout, q, k, v, flash.out, flash.lse, causal, true);
      CHECK(torch::allclose(dq1, dq2, 1e-12, 1e-12));
      CHECK(torch::allclose(dk1, dk2, 1e-12, 1e-12));
      CHECK(torch::allclose(dv1, dv2, 1e-12, 1e-12));
      CHECK(dk1.size(1) == kv_heads);  // only the kv heads' gradients: what travels
    }
}
