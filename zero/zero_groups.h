// zero/zero_groups.h — hybrid sharding (HSDP; FSDP2's 2-D mesh, torchtitan's dp_shard x
// dp_replicate, DeepSpeed's MiCS) and ZeRO++'s secondary shard (hpZ): the groups ZeRO's
// slices live on when they should not span the whole cp x dp group.
//
// ZeRO over the whole group of G ranks gathers and reduce-scatters across every link,
// the slow ones between nodes included. --zero-shard N cuts the group into shard groups
// of S consecutive ranks (N dp ranks x cp; consecutive ranks share a node) and
// replicates the slices across them:
//
//   cp x dp group, G = 8, --zero-shard 4 (S = 4):        group ranks
//     shard groups    (slices, gathers, reduce-scatters)  {0 1 2 3}   {4 5 6 7}    inside a node
//     replica groups  (the same slice: one all-reduce)    {0 4} {1 5} {2 6} {3 7}   across nodes
//
//   gradients:  reduce-scatter(avg) over my shard group  [padded] -> [padded / S]
//               all-reduce(avg) over my replica group    [padded / S], once per step
//               (avg of avgs over equal groups = the average over all G ranks)
//   parameters: stage 3 gathers within the shard group; stages 1-2 all-gather within it
//
// Each rank keeps 1/S of the state instead of 1/G, and sends (per step, ring, m micro-batches):
//   shard group   stage 1: 2 (S-1)/S x P_pad (one reduce-scatter, one all-gather)
//                 stage 2: (m+1) (S-1)/S x P_pad (m reduce-scatters, one per micro-batch,
//                          and one all-gather)
//                 stage 3: about 3 (S-1)/S x P_pad per micro-batch
//   replicas      2 (R-1)/R x P_pad / S   (R = G / S), the only traffic between nodes
//
// hpZ (--zero-hpz H, stage 3 only): after a unit's forward, each rank keeps its 1/(H x cp)
// part of the unit's full parameters (H x cp consecutive ranks of the shard group:
// zero_block_ranks) instead of only its 1/S slice; the backward's gather is then over the
// H x cp ranks of its secondary group, on a node's fast links, at the cost of
// P_pad / (H x cp) more parameters held from forward to backward.
//
//   shard group {0 1 2 3}, cp 1, --zero-hpz 2: secondary groups {0 1} {2 3}
//
// The member arithmetic is pure (tested without communication); ZeroGroups splits the
// communicators (collective over the group).
//
// Test: build/tests/unit_tests "[zero]"; ctest -R "equivalence.hsdp|cli.*hsdp"
#pragma once

#include <string>
#include <vector>

#include "picotron/comm.h"

namespace picotron {

// ---- pure arithmetic: group ranks 0 .. group_size-1, blocks of `block` consecutive ranks ----
// The members of `rank`'s block: {b*block, ..., b*block + block-1}.
std::vector<int> block_members(int group_size, int block, int rank);
// The members holding the same position in every block: {rank % block, + block, ...}.
std::vector<int> across_blocks_members(int group_size, int block, int rank);
// The sizes in ranks of the ZeRO group's blocks from the flags: `dp_ranks` data-parallel
// ranks of the shard (0: all of them, no replicas), times cp (every cp rank of a dp rank
// holds the same parameters), divided by `per_copy` (expert parallelism: the experts'
// group holds one rank in ep of each shard). Returns group_size for 0.
int zero_block_ranks(int dp_ranks, int cp, int per_copy, int group_size);

class ZeroGroups {
 public:
  // The whole group: one shard group, no replicas, no secondary shard (plain ZeRO).
  ZeroGroups(Comm& group);  // NOLINT: implicit, so plain ZeRO passes its group as before
  // `shard_ranks` (a divisor of group.size()) consecutive ranks per shard group; hpZ:
  // `secondary_ranks` (a divisor of shard_ranks; 0: none) per secondary group. Collective
  // over `group`. The groups are named after it: "cp_dp_shard", "cp_dp_replicas", "cp_dp_hpz".
  ZeroGroups(Comm& group, int shard_ranks, int secondary_ranks);
  ZeroGroups(ZeroGroups&&) noexcept;
  ZeroGroups& operator=(ZeroGroups&&) = delete;

  Comm& shard() { return split_ ? shard_ : *whole_; }
  const Comm& shard() const { return split_ ? shard_ : *whole_; }
  bool replicated() const { return replicas_.size() > 1; }
  Comm& replicas() { return replicas_; }        // size 1 when not replicated
  int replica() const { return replicas_.rank(); }  // 0: this rank's slice counts (norm, checkpoints)
  bool has_secondary() const { return has_secondary_; }
  Comm& secondary() { return secondary_; }       // hpZ's group (has_secondary())
  const std::string& whole_name() const { return whole_->name(); }
  // "sharded over cp_dp_shard = 2 ranks, replicated over cp_dp_replicas = 2" ("" plain).
  std::string describe() const;

 private:
  Comm* whole_;
  bool split_ = false, has_secondary_ = false;
  Comm shard_, replicas_, secondary_;
};

}  // namespace picotron
