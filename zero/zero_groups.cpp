// zero/zero_groups.cpp — HSDP's shard and replica groups and hpZ's secondary groups: the
// member arithmetic, and the splits. See zero_groups.h for the picture.
#include "zero/zero_groups.h"

#include <stdexcept>

namespace picotron {

std::vector<int> block_members(int group_size, int block, int rank) {
  std::vector<int> m;
  for (int r = rank / block * block; r < rank / block * block + block && r < group_size; ++r) m.push_back(r);
  return m;
}

std::vector<int> across_blocks_members(int group_size, int block, int rank) {
  std::vector<int> m;
  for (int r = rank % block; r < group_size; r += block) m.push_back(r);
  return m;
}

int zero_block_ranks(int dp_ranks, int cp, int per_copy, int group_size) {
  if (dp_ranks <= 0) return group_size;
  return dp_ranks * cp / per_copy;
}

ZeroGroups::ZeroGroups(Comm& group) : whole_(&group) {}

ZeroGroups::ZeroGroups(Comm& group, int shard_ranks, int secondary_ranks) : whole_(&group) {
  const int G = group.size(), r = group.rank();
  if (shard_ranks < 1 || G % shard_ranks != 0)
    throw std::invalid_argument("zero: a shard group of " + std::to_string(shard_ranks) + " ranks does not divide " +
                                group.name() + "'s " + std::to_string(G));
  if (secondary_ranks != 0 && (secondary_ranks < 1 || shard_ranks % secondary_ranks != 0))
    throw std::invalid_argument("zero: an hpZ group of " + std::to_string(secondary_ranks) +
                                " ranks does not divide the shard group's " + std::to_string(shard_ranks));
  if (shard_ranks < G) {
    shard_ = group.split(/*color=*/r / shard_ranks, /*key=*/r % shard_ranks, group.name() + "_shard");      // a block
    replicas_ = group.split(/*color=*/r % shard_ranks, /*key=*/r / shard_ranks, group.name() + "_replicas");  // across
    split_ = true;
  }
  if (secondary_ranks > 0) {
    Comm& s = shard();
    secondary_ = s.split(/*color=*/s.rank() / secondary_ranks, /*key=*/s.rank() % secondary_ranks, group.name() + "_hpz");
    has_secondary_ = true;
  }
}

ZeroGroups::ZeroGroups(ZeroGroups&& o) noexcept
    : whole_(o.whole_), split_(o.split_), has_secondary_(o.has_secondary_), shard_(std::move(o.shard_)),
      replicas_(std::move(o.replicas_)), secondary_(std::move(o.secondary_)) {}

std::string ZeroGroups::describe() const {
  std::string s;
  if (split_)
    s = "sharded over " + shard_.name() + " = " + std::to_string(shard_.size()) + " ranks, replicated over " +
        replicas_.name() + " = " + std::to_string(replicas_.size());
  if (has_secondary_)
    s += std::string(s.empty() ? "" : "; ") + "hpZ: after forward each unit kept over " + secondary_.name() + " = " +
         std::to_string(secondary_.size()) + " ranks";
  return s;
}

}  // namespace picotron
