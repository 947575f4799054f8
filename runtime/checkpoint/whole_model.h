// runtime/checkpoint/whole_model.h — the whole model at the end of a run, reassembled on
// rank 0 from every rank's shards (checkpoint.h: gather_full_tensors), whatever the mesh:
//
//   --save-params F   the fp32 master weights (fp64 in fp64 runs), a safetensors file by
//                     Hugging Face name (what the equivalence tests compare)
//   --export-hf DIR   the same weights as a Hugging Face folder (hf.h)
//
// Test: ctest -R equivalence (every case compares --save-params files); ctest -R hf_
#pragma once

#include "picotron/optim.h"
#include "picotron/optim_state.h"
#include "runtime/checkpoint/checkpoint.h"

namespace picotron {

// What the end of a run's files read of the run's flags (cut from them in runtime/cli/settings.h).
struct WholeModelSettings {
  LlamaConfig llama;  // the model whose shards are gathered
  std::string save_params;  // --save-params F ("": none)
  std::string export_hf;  // --export-hf DIR ("": none)
};

// Collective over `world` when either flag is given; a no-op otherwise.
void save_whole_model(const WholeModelSettings& settings, Optimizer& optimizer, const MeshShape& shape,
                      const ShardPlanOf& shard_plan_of, Comm& world);

}  // namespace picotron
