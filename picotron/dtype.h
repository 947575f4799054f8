// picotron/dtype.h — which torch dtype a precision computes in, and which one sums.
//
//   --dtype fp64 -> kFloat64    fp32 -> kFloat32    bf16 -> kBFloat16    fp16 -> kFloat16
//   sums, statistics and optimizer state: fp64 for fp64 runs, else fp32
//
// Test: build/tests/unit_tests "[model]"   (or ctest -L unit)
#pragma once

#include <torch/types.h>

#include "picotron/config.h"

namespace picotron {

inline torch::ScalarType scalar_type(Precision p) {
  switch (p) {
    case Precision::kFP64: return torch::kFloat64;
    case Precision::kBF16: return torch::kBFloat16;
    case Precision::kFP16: return torch::kFloat16;
    default: return torch::kFloat32;
  }
}

// Where sums, statistics and optimizer state are kept: fp64 for fp64 runs, else fp32
// (bf16 has 8 bits of mantissa: too few to add up thousands of terms).
inline torch::ScalarType accumulate_type(torch::ScalarType t) {
  return t == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

}  // namespace picotron
