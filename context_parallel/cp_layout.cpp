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
