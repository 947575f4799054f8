// runtime/checkpoint/whole_model.cpp — --save-params and --export-hf (whole_model.h).
#include "runtime/checkpoint/whole_model.h"

#include "picotron/utils.h"
#include "runtime/checkpoint/hf.h"
#include "runtime/cli/train_config.h"

namespace picotron {

void save_whole_model(const TrainConfig& cfg, Optimizer& optimizer, const MeshShape& shape,
                      const ShardPlanOf& shard_plan_of, Comm& world) {
  if (cfg.save_params.empty() && cfg.export_hf.empty()) return;
  const auto full =
      gather_full_tensors(optimizer.masters_by_name(), cfg.llama, shape, shard_plan_of, optimizer.state_dtype(), world);
  if (world.rank() != 0) return;
  if (!cfg.save_params.empty()) {
    save_tensors(cfg.save_params, full);
    print0(0, "saved parameters to " + cfg.save_params);
  }
  if (!cfg.export_hf.empty()) {
    export_hf(cfg.export_hf, cfg.llama, full);
    print0(0, "exported a Hugging Face folder to " + cfg.export_hf + " (config.json, model.safetensors)");
  }
}

}  // namespace picotron
