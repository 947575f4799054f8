// picotron/init.h — mesh-independent, deterministic initialisation.
//
// Every parameter is initialised FULL-SIZE from (seed, its Hugging Face name), one at
// a time, in fp32 on the CPU, then narrowed to the slice this rank holds (its shard
// record) and copied into the parameter, on the parameter's device and dtype:
//
//   full = N(0, init_std^2) drawn from Generator(hash(seed, name))   [full_shape], fp32
//   param = full.narrow(split_dim, offset, length)                   [local_shape]
//
// Consequences:
//   * every mesh starts from bit-identical weights: a shard IS the slice of the
//     single-process parameter (the equivalence contract);
//   * adding, removing or reordering parameters never changes the others' values;
//   * peak extra memory is one full parameter, never the full model.
//
//   weight matrices and embeddings ~ N(0, init_std^2)      RMSNorm weights = 1
//
// Test: build/tests/unit_tests "[init]"   (or ctest -L unit)
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "picotron/shard.h"

namespace picotron {

// 64-bit seed of one parameter: a hash of the run's seed and the name (FNV-1a then a
// splitmix64 finaliser, so nearby seeds give unrelated streams).
uint64_t parameter_seed(uint64_t seed, const std::string& name);

// The full-size initial value of parameter `name`: [full_shape], fp32, CPU.
torch::Tensor initial_value(const std::string& name, torch::IntArrayRef full_shape, uint64_t seed, double init_std);

// This rank's slice of a full tensor: full.narrow(split_dim, offset, length), or full.
torch::Tensor local_slice(const torch::Tensor& full, const ShardRecord& record);

// Overwrite every parameter of `module` with its slice of the full initial value
// (converted to the parameter's dtype and device). Every parameter must have a record.
void init_parameters(torch::nn::Module& module, const ShardPlan& plan, uint64_t seed, double init_std);
// The same for a module whose parameters are all whole (no plan needed).
void init_parameters(torch::nn::Module& module, uint64_t seed, double init_std);

}  // namespace picotron
