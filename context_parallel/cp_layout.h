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
// Test: build/tests/unit_tests "[cp]"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace picotron {

enum class CpLayout { kContiguous, kZigzag };
CpLayout parse_cp_layout(const std::string& name);  // throws std::invalid_argument naming --cp-layout
const char* cp_layout_name(CpLayout layout);

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
