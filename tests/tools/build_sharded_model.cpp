// build_sharded_model MODEL WAYS INDEX DTYPE [init] — build a preset with every weight matrix
// split WAYS ways (rows), as rank INDEX of a WAYS-way plan would, and report what was
// allocated. Run under an address-space limit far below the full model's size, it
// proves the model allocates only its shards, directly in DTYPE:
//
//   llama3-8b, 8 ways, bf16: 1.0 B parameters = 2 GB per rank, where the full model is
//   16 GB in bf16 (32 GB in fp32): `ulimit -v 6291456` (6 GiB) passes only if no full
//   model (and no fp32 copy) is ever built.
//
// With `init`, also initialise it: every FULL parameter is drawn, one at a time, and
// narrowed to the shard, so memory peaks at the shards plus one full parameter (plus
// its narrowed copy), never at the full model. smollm-1.7b, 8 ways, fp32: 0.86 GB of
// shards + the 0.4 GB embedding, where the full model is 6.8 GB.
//
// Test: ctest -R sharded_8b
#include <torch/torch.h>

#include <iostream>

#include "expert_parallel/moe.h"
#include "picotron/init.h"
#include "picotron/model.h"
#include "picotron/shard.h"
#include "picotron/dtype.h"
#include "picotron/format.h"

using namespace picotron;

int main(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && std::string(argv[5]) == "init")) {
    std::cerr << "usage: build_sharded_model MODEL WAYS INDEX fp32|bf16 [init]" << std::endl;
    return 2;
  }
  const LlamaConfig c = preset(argv[1]);
  const int ways = std::stoi(argv[2]), index = std::stoi(argv[3]);
  const auto dtype = std::string(argv[4]) == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  ShardPlan plan = replicated_plan(c);
  for (auto& [name, r] : plan)
    if (r.full_shape.size() == 2) r.split(/*dim=*/0, Axis::kTp, index, ways);  // every matrix, by rows
  LlamaForCausalLM model(c, plan, torch::TensorOptions().dtype(dtype));
  add_experts(*model, plan, torch::TensorOptions().dtype(dtype));  // (a Mixtral preset)
  if (argc == 6) init_parameters(*model, plan, /*seed=*/1, /*init_std=*/0.02);
  int64_t allocated = 0;
  for (const auto& item : model->named_parameters()) {
    TORCH_CHECK(item.value().scalar_type() == dtype, item.key(), " is not in the requested dtype");
    TORCH_CHECK(item.value().sizes() == torch::IntArrayRef(plan.at(item.key()).local_shape()), item.key(),
                " has the wrong local shape");
    allocated += item.value().numel();
  }
  TORCH_CHECK(allocated == local_parameter_count(plan), "allocated ", allocated, " != plan ", local_parameter_count(plan));
  std::cout << argv[1] << " split " << ways << " ways, rank " << index << ": " << with_commas(allocated) << " of "
            << with_commas(count_parameters(c)) << " parameters allocated, "
            << human_bytes(double(allocated) * torch::elementSize(dtype)) << " in " << argv[4]
            << (argc == 6 ? ", initialised" : "") << std::endl;
  return 0;
}
