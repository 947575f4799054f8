// zero/zero_layout.cpp — ZeRO's layout, pure arithmetic: which bucket (stage 3: unit)
// each parameter lies in, the padding, and which piece of it each rank owns. See zero_layout.h.
#include "zero/zero_layout.h"

#include <torch/torch.h>

#include <algorithm>

namespace picotron {

ZeroLayout zero_layout(const std::vector<int64_t>& numels, int N, int64_t bucket_capacity,
                       const std::vector<int>& units) {
  TORCH_CHECK(units.empty() || units.size() == numels.size(), "zero_layout: one unit id per parameter");
  ZeroLayout l;
  l.ranks = N;
  l.offsets.resize(numels.size());
  // Consecutive parameters fill a bucket up to the capacity (a bigger one gets its own)
  // or until the unit changes; each bucket is padded to a multiple of N with zeros that
  // nobody owns.
  for (size_t i = 0; i < numels.size(); ++i) {
    const bool full = !l.buckets.empty() && l.buckets.back().numel > 0 &&
                      l.buckets.back().numel + numels[i] > bucket_capacity;
    const bool new_unit = !units.empty() && i > 0 && units[i] != units[i - 1];
    if (l.buckets.empty() || full || new_unit) l.buckets.push_back({i, i, 0, 0, 0, 0});
    auto& b = l.buckets.back();
    b.end_param = i + 1;
    b.numel += numels[i];
    l.numel += numels[i];
  }
  for (auto& b : l.buckets) {
    b.offset = l.padded;
    b.padded = (b.numel + N - 1) / N * N;
    b.shard_offset = l.shard;
    int64_t at = b.offset;
    for (size_t i = b.first_param; i < b.end_param; ++i) l.offsets[i] = at, at += numels[i];
    l.padded += b.padded;
    l.shard += b.padded / N;
  }
  return l;
}

std::string zero3_unit(const std::string& name) {
  const std::string layers = "model.layers.";
  if (name.rfind(layers, 0) == 0) return "layer " + name.substr(layers.size(), name.find('.', layers.size()) - layers.size());
  if (name.rfind("model.embed_tokens.", 0) == 0) return "embedding";
  return "head";  // model.norm.weight, lm_head.weight
}

std::vector<int> embedding_alone_units(const std::vector<std::string>& names, bool pipeline_end) {
  if (!pipeline_end) return {};
  std::vector<int> units;
  for (const auto& name : names) units.push_back(zero3_unit(name) == "embedding" ? 0 : 1);
  return units;
}

std::vector<ZeroLayout::Piece> ZeroLayout::pieces(int rank) const {
  std::vector<Piece> out;
  for (const auto& b : buckets) {
    const int64_t slice = b.padded / ranks;                        // each rank's part of this bucket
    const int64_t lo = b.offset + rank * slice, hi = lo + slice;  // mine: [lo, hi) of the flat buffer
    for (size_t i = b.first_param; i < b.end_param; ++i) {
      const int64_t begin = offsets[i], end = i + 1 < b.end_param ? offsets[i + 1] : b.offset + b.numel;
      const int64_t x = std::max(begin, lo), y = std::min(end, hi);
      if (x < y) out.push_back({i, x - begin, y - x, b.shard_offset + (x - lo)});
    }
  }
  return out;
}

}  // namespace picotron
