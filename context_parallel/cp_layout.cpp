// context_parallel/cp_layout.cpp — see cp_layout.h for the pictures.
#include "context_parallel/cp_layout.h"

#include <stdexcept>

namespace picotron {

CpLayout parse_cp_layout(const std::string& name) {
  if (name == "contiguous") return CpLayout::kContiguous;
  if (name == "zigzag") return CpLayout::kZigzag;
  throw std::invalid_argument("--cp-layout must be contiguous or zigzag, got '" + name + "'");
}

const char* cp_layout_name(CpLayout layout) { return layout == CpLayout::kZigzag ? "zigzag" : "contiguous"; }

CpMode parse_cp_mode(const std::string& name) {
  if (name == "ring") return CpMode::kRing;
  if (name == "ulysses") return CpMode::kUlysses;
  if (name == "hybrid") return CpMode::kHybrid;
  throw std::invalid_argument("--cp-mode must be ring, ulysses or hybrid, got '" + name + "'");
}

const char* cp_mode_name(CpMode mode) {
  return mode == CpMode::kRing ? "ring" : mode == CpMode::kUlysses ? "ulysses" : "hybrid";
}

int cp_ulysses_size(CpMode mode, int C, int ulysses) {
  return mode == CpMode::kRing ? 1 : mode == CpMode::kUlysses ? C : ulysses;
}

std::vector<int> cp_a2a_members(int U, int rank) {
  std::vector<int> m;
  for (int u = 0; u < U; ++u) m.push_back(cp_ring_rank(rank, U) * U + u);  // key: the all-to-all rank
  return m;
}

std::vector<int> cp_ring_members(int C, int U, int rank) {
  std::vector<int> m;
  for (int i = 0; i < C / U; ++i) m.push_back(i * U + cp_a2a_rank(rank, U));  // key: the ring rank
  return m;
}

std::string cp_mode_problem(CpMode mode, int C, int ulysses, int64_t heads_per_tp) {
  const std::string c = std::to_string(C), u = std::to_string(ulysses);
  if (mode != CpMode::kHybrid && ulysses != 0)
    return "--cp-ulysses " + u + " sets the all-to-all group of --cp-mode hybrid (got --cp-mode " + cp_mode_name(mode) + ")";
  if (mode == CpMode::kHybrid && (ulysses < 2 || ulysses >= C || C % ulysses != 0))
    return "--cp-mode hybrid needs --cp-ulysses U with 1 < U < --cp " + c + " dividing it (got " + u +
           "): U ranks exchange heads, cp/U form each ring";
  const int U = cp_ulysses_size(mode, C, ulysses);
  if (U > 1 && heads_per_tp % U != 0)
    return "--cp-mode " + std::string(cp_mode_name(mode)) + ": the " + std::to_string(heads_per_tp) +
           " attention heads per tp rank (--num-attention-heads / --tp) are not divisible by the all-to-all group " +
           std::to_string(U) + " (" + (mode == CpMode::kUlysses ? "--cp " + c : "--cp-ulysses " + u) +
           "): use --cp-mode ring, or a group dividing them";
  return "";
}

std::vector<int64_t> ulysses_order(int64_t seq_len, int C, int U, int rank, CpLayout layout) {
  const int first = cp_ring_rank(rank, U) * U;  // the group: cp ranks first .. first+U-1
  std::vector<int64_t> gathered;                  // [U·S/C] positions, in rank order
  for (int u = 0; u < U; ++u)
    for (int64_t p : cp_positions(seq_len, C, first + u, layout)) gathered.push_back(p);
  const std::vector<int64_t> ring = cp_positions(seq_len, C / U, cp_ring_rank(rank, U), layout);
  std::vector<int64_t> where(seq_len, -1), order;  // where[p]: index of position p in gathered
  for (size_t i = 0; i < gathered.size(); ++i) where[gathered[i]] = int64_t(i);
  for (int64_t p : ring) order.push_back(where[p]);
  return order;
}

std::string cp_problem(int64_t seq_len, int C, CpLayout layout) {
  const int64_t chunks = layout == CpLayout::kZigzag ? 2 * int64_t(C) : C;
  if (C <= 1 || seq_len % chunks == 0) return "";
  return "--seq-len " + std::to_string(seq_len) + " is not divisible by " +
         (layout == CpLayout::kZigzag ? "2 x --cp = " + std::to_string(chunks) +
                                            " (--cp-layout zigzag gives each rank two chunks of S / 2cp)"
                                      : "--cp " + std::to_string(C) + " (--cp-layout contiguous)");
}

std::vector<int64_t> cp_positions(int64_t seq_len, int C, int rank, CpLayout layout) {
  std::vector<int64_t> out;
  const auto chunk = [&](int64_t index, int64_t size) {
    for (int64_t t = 0; t < size; ++t) out.push_back(index * size + t);
  };
  if (layout == CpLayout::kContiguous) {
    chunk(rank, seq_len / C);
  } else {
    chunk(rank, seq_len / (2 * C));          // an early chunk ...
    chunk(2 * C - 1 - rank, seq_len / (2 * C));  // ... and its mirror from the end
  }
  return out;
}

std::vector<RingBlock> ring_blocks(CpLayout layout, int C, int rank, int step, int64_t n) {
  const int owner = ((rank - step) % C + C) % C;  // whose keys/values this rank holds now
  if (owner == rank) return {{0, n, 0, n, /*causal=*/true}};
  if (layout == CpLayout::kContiguous) {
    if (owner < rank) return {{0, n, 0, n, false}};  // an earlier chunk: all of it is visible
    return {};                                       // a later chunk: all in the future
  }
  const int64_t half = n / 2;
  if (owner < rank) return {{0, n, 0, half, false}};  // both my chunks see the owner's early chunk only
  return {{half, half, 0, n, false}};                 // only my late chunk sees, and sees both of its chunks
}

int64_t ring_attention_work(CpLayout layout, int C, int rank, int64_t n) {
  int64_t pairs = 0;
  for (int step = 0; step < C; ++step)
    for (const RingBlock& b : ring_blocks(layout, C, rank, step, n))
      pairs += b.causal ? b.q_len * (b.q_len + 1) / 2 : b.q_len * b.k_len;
  return pairs;
}

}  // namespace picotron
