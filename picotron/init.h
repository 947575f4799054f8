// picotron/init.h — mesh-independent, deterministic initialisation.
//
// Every parameter is initialised FULL-SIZE from (seed, its Hugging Face name), one at
// a time, in fp32 on the CPU, and only then copied (and later: sliced) into the
// parameter that a rank owns. Consequences:
//   * every mesh starts from bit-identical weights (the equivalence contract);
//   * adding, removing or reordering parameters never changes the others' values;
//   * peak extra memory is one full parameter.
//
//   weight matrices and embeddings ~ N(0, init_std^2)      RMSNorm weights = 1
//
// Test: build/tests/unit_tests "[init]"   (or ctest -L unit)
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace picotron {

// 64-bit seed of one parameter: a hash of the run's seed and the name (FNV-1a then a
// splitmix64 finaliser, so nearby seeds give unrelated streams).
uint64_t parameter_seed(uint64_t seed, const std::string& name);

// The full-size initial value of parameter `name`: [full_shape], fp32, CPU.
torch::Tensor initial_value(const std::string& name, torch::IntArrayRef full_shape, uint64_t seed, double init_std);

// Overwrite every parameter of `module` with its initial value (converted to the
// parameter's dtype and device). Parameters are visited by name.
void init_parameters(torch::nn::Module& module, uint64_t seed, double init_std);

}  // namespace picotron
