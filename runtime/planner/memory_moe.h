// runtime/planner/memory_moe.h — what a mixture-of-experts block (expert_parallel/moe.h) keeps,
// for the --dry-run estimate (memory_estimate.h), in bytes per token of this rank's
// micro-batch (B x S/cp tokens; under sp each tp rank routes S/tp of the positions, so
// 1/tp of that). e: the compute dtype's bytes, a: the accumulation dtype's.
//
// Routing is assumed balanced: each rank's experts get k.T (token, slot) pairs, as many
// as it sends. A rank whose experts are popular keeps more (a few percent on the tests).
// Test: ctest -R memory_estimate.tiny_moe
#pragma once

#include <string>

#include "runtime/cli/train_config.h"

namespace picotron {

// What the block keeps for backward (A_moe); `formula` gets its text.
double moe_per_token(const TrainConfig& c, double e, double a, std::string* formula);
// The backward of the last MoE block at its widest.
double moe_backward_per_token(const TrainConfig& c, double e);
// --ep: the forward of the last MoE block at its widest (the all-to-all buffers alive).
double ep_forward_per_token(const TrainConfig& c, double e);

}  // namespace picotron
