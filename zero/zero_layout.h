// zero/zero_layout.h — ZeRO's flat layout, pure arithmetic (no communication): which
// bucket each parameter lies in, the padding, and which piece of it each rank owns.
// Every ZeRO stage cuts its state with it; the --dry-run estimator and checkpoints read it.
//
// Test: build/tests/unit_tests "[zero]"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace picotron {

// Where each parameter sits in the flat buffer, and who owns which piece (pure).
// Parameters are laid end to end in buckets of about --dp-bucket-mb (stage 2
// reduce-scatters them as backward completes them; stage 1 after backward, one by one);
// `units` (stage 3: one id per parameter, equal ids consecutive) also starts a new
// bucket wherever the id changes. Each bucket is padded to a multiple of N, and rank r
// owns the r-th 1/N of every bucket; its slice is those parts, one after the other:
//
//   bucket 0 [a a a b b c|pad]   bucket 1 [d d d d]        N = 2
//   rank 0:  a a a               d d        -> slice [a a a d d]
//   rank 1:  b b c pad           d d        -> slice [b b c . d d]
struct ZeroLayout {
  struct Bucket {
    size_t first_param, end_param;  // parameters [first, end)
    int64_t offset, numel, padded;  // where it starts in the flat buffer, its size, padded to N
    int64_t shard_offset;           // where its part starts in every rank's slice
  };
  int ranks = 1;                 // N
  std::vector<Bucket> buckets;
  std::vector<int64_t> offsets;  // parameter i starts at flat offset offsets[i]
  int64_t numel = 0;             // sum of the parameters' sizes
  int64_t padded = 0;            // the flat buffer: the buckets, each padded to a multiple of N
  int64_t shard = 0;             // padded / N: each rank's slice
  // The part of parameter i inside rank r's slice: [first, first + length) of its
  // flattened elements, at `slice_offset` within the slice.
  struct Piece {
    size_t param;
    int64_t first, length, slice_offset;
  };
  std::vector<Piece> pieces(int rank) const;
};
ZeroLayout zero_layout(const std::vector<int64_t>& numels, int N, int64_t bucket_capacity = INT64_MAX,
                       const std::vector<int>& units = {});
// ZeRO-3's unit of a parameter name: "embedding", "layer 3" or "head" (final norm, lm_head).
std::string zero3_unit(const std::string& param_name);
// Stage 2's unit ids (`names`: this rank's parameters in order): the embedding in a bucket
// of its own when this rank is a pipeline's end, `pipeline_end` (its first stage, or the
// last one's copy of a tied embedding), so both ends cut it alike (zero/zero2.h); else none.
std::vector<int> embedding_alone_units(const std::vector<std::string>& names, bool pipeline_end);

}  // namespace picotron
