// runtime/checkpoint/whole_model.cpp — --save-params and --export-hf (whole_model.h).
#include "runtime/checkpoint/whole_model.h"

#include "runtime/output/print0.h"
#include "runtime/checkpoint/hf.h"

namespace picotron {

void save_whole_model(const WholeModelSettings& settings, Optimizer& optimizer, const MeshShape& shape,
                      const ShardPlanOf& shard_plan_of, Comm& world) {
  if (settings.save_params.empty() && settings.export_hf.empty()) return;
  OptimizerState& state = state_of(optimizer, "--save-params / --export-hf");
  const auto full =
      gather_full_tensors(state.masters_by_name(), settings.llama, shape, shard_plan_of, state.state_dtype(), world);
  if (world.rank() != 0) return;
  if (!settings.save_params.empty()) {
    save_tensors(settings.save_params, full);
    print0(0, "saved parameters to " + settings.save_params);
  }
  if (!settings.export_hf.empty()) {
    export_hf(settings.export_hf, settings.llama, full);
    print0(0, "exported a Hugging Face folder to " + settings.export_hf + " (config.json, model.safetensors)");
  }
}

}  // namespace picotron
