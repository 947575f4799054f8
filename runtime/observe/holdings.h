// runtime/observe/holdings.h — what each rank holds, in the model's own terms: its
// layers, attention heads, MLP columns, vocabulary rows and sequence positions. Rank 0
// prints it at start-up (and --dry-run), read straight off every rank's shard plan
// (picotron/shard.h) and the cp layout (context_parallel/cp_layout.h): pure, no
// communication.
//
//   up to 7 ranks: a line per rank        rank 3 (dp 0 pp 1 cp 0 tp 1): layers 2-3, final norm, head |
//                                           heads 2-3, kv 1, mlp 192-383 | vocab 128-255 | tokens 8-15, 48-55
//   8 and more: a line per coordinate     pp 1: layers 2-3, final norm, head
//   of each axis (a rank holds the        tp 1: heads 2-3 of 4, kv heads 1 of 2, ...
//   intersection; the mesh table above    cp 1: tokens 8-15, 48-55 of 64 (zigzag)
//   says which rank has which coordinates)
//
// Test: build/tests/unit_tests "[holdings]"
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/cli/train_config.h"
#include "picotron/mesh_grid.h"
#include "picotron/shard.h"

namespace picotron {

// "0-7, 24-31": sorted integers as runs of consecutive values.
std::string ranges_text(const std::vector<int64_t>& sorted_values);
// "a-b" (inclusive), or "a" for one item: the items [first, first + count).
std::string span_text(int64_t first, int64_t count);

// What one rank holds, read off its shard plan and the cp layout: the one model of it,
// which the start-up table below and --explain (runtime/observe/explain.h) each print.
struct RankHoldings {
  struct Span {
    int64_t first = 0, count = 0;  // items [first, first + count)
  };
  std::vector<int64_t> layers;     // decoder layers, ascending
  bool embedding = false;          // the embedding, for this stage's lookup
  bool final_norm = false;         // the final norm (and so the head): the last stage
  bool lm_head = false;            // an untied lm_head
  bool tied_copy = false;          // a pipeline's last-stage copy of a tied embedding (its head only)
  // Of the first decoder layer held (tensor parallelism's cut; no layer: all zero).
  Span q_heads, kv_heads, mlp_columns;
  std::vector<int64_t> experts;    // a mixture of experts: the experts held (expert parallelism)
  bool moe = false;
  Span vocab_rows;                 // the vocabulary rows of the head's matrix (lm_head, else the embedding)
  bool vocab_held = false;
  bool embedding_split = false;    // the embedding's rows cut over tp (vocabulary-parallel)
  Span embedding_rows;
  std::vector<int64_t> positions;  // this cp rank's positions of every sequence, ascending
};
RankHoldings holdings_of(const TrainConfig& c, const MeshCoords& here, const ShardPlan& plan);

// The start-up table of what each rank holds (layout as above).
std::string holdings_summary(const TrainConfig& c, const MeshShape& shape,
                             const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of);

}  // namespace picotron
