// zero/zero.cpp — the --zero flag to its stage's optimizer. See zero.h.
#include "zero/zero.h"

namespace picotron {

std::unique_ptr<ZeroOptimizer> make_zero_optimizer(int stage, Comm& group,
                                                    const std::vector<std::pair<std::string, torch::Tensor>>& named,
                                                    AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here,
                                                    double bucket_mb, bool offload, LlamaForCausalLM& model,
                                                    int shard_ranks, int hpz_ranks) {
  TORCH_CHECK(hpz_ranks == 0 || stage == 3, "--zero-hpz needs --zero 3 (it keeps part of each unit's gathered parameters)");
  ZeroGroups groups = shard_ranks == 0 && hpz_ranks == 0
                          ? ZeroGroups(group)
                          : ZeroGroups(group, shard_ranks == 0 ? group.size() : shard_ranks, hpz_ranks);
  switch (stage) {
    case 1: return std::make_unique<Zero1Optimizer>(std::move(groups), named, opts, plan, here, bucket_mb, offload);
    case 2: return std::make_unique<Zero2Optimizer>(std::move(groups), named, opts, plan, here, bucket_mb, offload);
    case 3: return std::make_unique<Zero3Optimizer>(std::move(groups), named, opts, plan, here, offload, model);
  }
  throw std::invalid_argument("--zero " + std::to_string(stage) + " does not exist (0, 1, 2 or 3)");
}

}  // namespace picotron
