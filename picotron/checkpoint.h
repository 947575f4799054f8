// picotron/checkpoint.h — write and read full parameters by name.
//
// A parameter file maps Hugging Face names to full (unsharded) tensors, so a file
// written on one mesh can be read on any other: the equivalence harness compares the
// final parameters of a parallel run with the single-process run through it.
// Format: LibTorch's serialize archive (a zip of tensors), keys = parameter names.
//
// Test: build/tests/unit_tests "[checkpoint]"
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace picotron {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes every tensor (moved to the CPU). Throws naming the path if it cannot.
void save_tensors(const std::string& path, const NamedTensors& tensors);
// Reads a file written by save_tensors. Throws one line naming the path if it is
// missing or corrupt.
std::map<std::string, torch::Tensor> load_tensors(const std::string& path);

}  // namespace picotron
