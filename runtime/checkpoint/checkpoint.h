// runtime/checkpoint/checkpoint.h — write and read full parameters by name; reassemble full
// parameters from the shards every rank holds.
//
// A parameter file maps Hugging Face names to full (unsharded) tensors, so a file
// written on one mesh can be read on any other: the equivalence harness compares the
// final parameters of a parallel run with the single-process run through it.
// Format: safetensors (runtime/checkpoint/safetensors.h), keys = parameter names: Python reads it
// with `safetensors.torch.load_file`. Checkpoints that resume: runtime/checkpoint/resume.h.
//
// Test: build/tests/unit_tests "[checkpoint]"; gather_full_tensors: ctest -R sharded
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/shard.h"

namespace picotron {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes every tensor (moved to the CPU). Throws naming the path if it cannot.
void save_tensors(const std::string& path, const NamedTensors& tensors, const std::string& flag = "--save-params");
// Reads a file written by save_tensors. Throws one line naming the path if it is
// missing or corrupt.
std::map<std::string, torch::Tensor> load_tensors(const std::string& path);

// Copy full tensors into a module's parameters: each parameter gets its slice
// (local_slice of its record), so full tensors load into a model of any plan. Every
// parameter must be given. Without a plan: a whole model (full shapes).
void load_parameters(torch::nn::Module& module, const NamedTensors& full, const ShardPlan& plan = {});

// The plan of any rank, from its mesh coordinates: a pure function, so rank 0 knows
// what every other rank holds without asking.
using ShardPlanOf = std::function<ShardPlan(const MeshCoords&)>;

// Reassemble FULL tensors on world rank 0 from the pieces the ranks hold.
//
//   rank r:  the pieces of its plan whose copy counts (counts_once), in name order,
//            flattened into one buffer  --send-->  rank 0
//   rank 0:  knows shard_plan_of(coords(r)), so it knows every piece's name, slice and size;
//            it copies each into full[name].narrow(split_dim, offset, length)
//
// Each element of the model travels once (replicas stay home). `local`: this rank's
// tensors by name (its parameters or master weights), each of its record's local shape.
// Returns every parameter whole, in `dtype`, on the CPU, in the model's order, on rank
// 0; an empty list elsewhere. Throws if the plans do not cover every element exactly once.
NamedTensors gather_full_tensors(const std::map<std::string, torch::Tensor>& local, const LlamaConfig& config,
                                 const MeshShape& shape, const ShardPlanOf& shard_plan_of, torch::ScalarType dtype, Comm& world);

}  // namespace picotron
