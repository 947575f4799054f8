// zero/zero.h — ZeRO (Rajbhandari et al., arXiv 1910.02054): data parallelism without N
// copies of the optimizer state (stage 1), the gradients (stage 2) and the parameters
// (stage 3). Read it as a ladder: each stage is one class that OWNS the small core and
// reads alone, top to bottom, its communication first:
//
//   zero/zero_layout.h  who owns which slice of the flat buffers (pure arithmetic)
//   zero/zero_groups.h  HSDP and hpZ: the slices over shard groups, replicated across them
//   zero/zero_shard.h   the core: the buffers, my slice, AdamW over it, the all-gather
//   zero/zero1.h        ZeRO-1: reduce-scatter the gradient, AdamW on my slice, all-gather
//   zero/zero2.h        ZeRO-2: each bucket reduce-scattered as backward completes it
//   zero/zero3.h        ZeRO-3: each layer's parameters gathered as it runs, released after
//   zero/zero_state.h   checkpoints, export and the bytes kept: the view apart from the step
//
// What one rank keeps between steps, for P parameters over N = cp x dp ranks (bf16
// weights, fp32 gradients, master weights and AdamW moments; bytes per parameter):
//
//   stage   weights   gradients        master + moments
//   0       2P        4P               12P               (plain AdamW + data_parallel/)
//   1       2P        4P + 4P/N        12P/N
//   2       2P        4P/N             12P/N
//   3       2P/N      4P/N             12P/N
//
// The communication each stage costs per step: zero/README.md (checked against Comm's
// ledger by the tests).
//
// Test: build/tests/unit_tests "[zero]"; ctest -R "zero|data_parallel.overlap"
#pragma once

#include <memory>

#include "zero/zero1.h"
#include "zero/zero2.h"
#include "zero/zero3.h"

namespace picotron {

// The optimizer of --zero `stage` (1, 2 or 3) over `group` (cp x dp). Stage 3 also takes
// over `model`'s layer and part runners (gather before, release after). `shard_ranks`
// (--zero-shard: 0 = the whole group) and `hpz_ranks` (--zero-hpz: 0 = none) are in
// ranks of `group` (zero_block_ranks); collective over `group` when either splits it.
std::unique_ptr<ZeroOptimizer> make_zero_optimizer(int stage, Comm& group,
                                                    const std::vector<std::pair<std::string, torch::Tensor>>& named,
                                                    AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here,
                                                    double bucket_mb, bool offload, LlamaForCausalLM& model,
                                                    int shard_ranks = 0, int hpz_ranks = 0);

}  // namespace picotron
