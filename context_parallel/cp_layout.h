// context_parallel/cp_layout.h — who holds which tokens, and which attention blocks each
// rank computes at each step of the ring. Pure arithmetic (no torch): tested without
// communication, executed by context_parallel.cpp.
//
// A sequence of S tokens over C cp ranks:
//
//   contiguous  rank i holds chunk i of C              (S/C tokens)
//               |  0  |  1  |  2  |  3  |               C = 4
//   zigzag      rank i holds chunks i and 2C-1-i of 2C  (S/2C + S/2C tokens)
//               | 0 | 1 | 2 | 3 | 3 | 2 | 1 | 0 |       C = 4
//
// Causal attention: a query sees the keys at or before it. Contiguous gives rank C-1
// all the work (its queries see every earlier chunk) and rank 0 almost none; zigzag pairs
// an early chunk with a late one, so every rank does the same work.
//
// The ring: at step s (0 .. C-1) rank r holds the keys/values of rank (r - s) mod C and
// computes its queries against them:
//
//   contiguous, owner j:  j == r: causal block;  j < r: full block;  j > r: nothing
//   zigzag,     owner j:  j == r: causal block (its two chunks keep their order)
//                         j <  r: all my queries x j's first chunk (its second is later)
//                         j >  r: my second chunk x all of j's keys (my first is earlier)
//
// Ulysses and the hybrid (ulysses.h): the cp group of C ranks factors into all-to-all
// groups of U consecutive cp ranks and rings of R = C/U ranks (U = C: pure Ulysses, R = 1).
// All-to-all group i (cp ranks iU .. iU+U-1) together holds exactly what ring rank i of R
// would hold in the same layout, e.g. C = 4, U = 2, zigzag, S = 16 (chunks of 2):
//
//   cp rank 0: 0-1 | 14-15   cp rank 1: 2-3 | 12-13    -> ring rank 0 of 2: 0-3 | 12-15
//   cp rank 2: 4-5 | 10-11   cp rank 3: 6-7 |  8-9     -> ring rank 1 of 2: 4-7 |  8-11
//
// so after the all-to-all a permutation (ulysses_order) puts the gathered tokens into the
// ring's order, and the ring's causal blocks (or, with R = 1, one causal block over the
// natural order 0 .. S-1) stay exact.
//
// Test: build/tests/unit_tests "[cp]"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace picotron {

enum class CpLayout { kContiguous, kZigzag };
CpLayout parse_cp_layout(const std::string& name);  // throws std::invalid_argument naming --cp-layout
const char* cp_layout_name(CpLayout layout);

// How attention meets the other ranks' tokens: ring (k, v travel round the cp group),
// ulysses (an all-to-all turns the sequence split into a head split), hybrid (both).
enum class CpMode { kRing, kUlysses, kHybrid };
CpMode parse_cp_mode(const std::string& name);  // throws std::invalid_argument naming --cp-mode
const char* cp_mode_name(CpMode mode);
// The all-to-all group size U of a mode: ring 1, ulysses C, hybrid `ulysses` (--cp-ulysses).
int cp_ulysses_size(CpMode mode, int C, int ulysses);
// "" if the mode fits C ranks and the heads a tp rank holds (nH/tp, nKV/tp), else one line
// naming the flags: U must divide C and nH/tp (nKV/tp need not: ulysses.h repeats k, v heads).
std::string cp_mode_problem(CpMode mode, int C, int ulysses, int64_t heads_per_tp);

// The ring rank (0 .. C/U-1) and all-to-all rank (0 .. U-1) of cp rank `rank`.
inline int cp_ring_rank(int rank, int U) { return rank / U; }
inline int cp_a2a_rank(int rank, int U) { return rank % U; }
// The cp ranks of cp rank `rank`'s all-to-all group (U consecutive: (rank/U)·U .. +U-1) and
// of its ring (C/U ranks, every U-th: rank%U, U + rank%U, ...), in their group's rank order.
// C = 4, U = 2: all-to-alls {0,1} {2,3}, rings {0,2} {1,3}.
std::vector<int> cp_a2a_members(int U, int rank);
std::vector<int> cp_ring_members(int C, int U, int rank);
// Indices into the tokens of cp rank `rank`'s all-to-all group, concatenated in rank order
// ([U·S/C]), that put them in the order ring rank rank/U of C/U holds them:
// gathered[ulysses_order[j]] = cp_positions(S, C/U, rank/U, layout)[j]. U = C: 0 .. S-1.
std::vector<int64_t> ulysses_order(int64_t seq_len, int C, int U, int rank, CpLayout layout);

// "" if S tokens split over C ranks in this layout, else one line naming the flags.
std::string cp_problem(int64_t seq_len, int C, CpLayout layout);

// The token positions (0 .. S-1) cp rank `rank` holds, in its local order: [S/C].
std::vector<int64_t> cp_positions(int64_t seq_len, int C, int rank, CpLayout layout);

// One block of ring attention: local query rows [q_first, q_first + q_len) against rows
// [k_first, k_first + k_len) of the key/value block held at that step; causal only on
// the diagonal (then q and k are the same rows).
struct RingBlock {
  int64_t q_first, q_len, k_first, k_len;
  bool causal;
};
// What cp rank `rank` computes at ring step `step` (S_local = S/C tokens per rank).
std::vector<RingBlock> ring_blocks(CpLayout layout, int C, int rank, int step, int64_t s_local);
// The query-key pairs rank `rank` computes over a whole ring, per sequence and head:
// the attention work it does (a causal block of n rows counts n(n+1)/2).
int64_t ring_attention_work(CpLayout layout, int C, int rank, int64_t s_local);

}  // namespace picotron
