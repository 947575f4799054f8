// picotron/startup.cpp — see startup.h.
#include "picotron/startup.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "picotron/memory_estimate.h"
#include "picotron/output_file.h"
#include "picotron/safetensors.h"
#include "picotron/utils.h"

namespace picotron {

std::vector<std::string> output_problems(const TrainConfig& cfg) {
  std::vector<std::string> problems;
  for (const auto& [flag, path, directory] :
       {std::tuple{"--metrics-file", cfg.metrics_file, false}, {"--memory-trace", cfg.memory_trace, false},
        {"--save-params", cfg.save_params, false}, {"--pp-trace", cfg.pp_trace, false},
        {"--eval-logits", cfg.eval_logits, false}, {"--save-dir", cfg.save_dir, true},
        {"--export-hf", cfg.export_hf, true}})
    if (!path.empty())
      if (auto p = output_path_problem(flag, path, directory, cfg.data); !p.empty()) problems.push_back(p);
  return problems;
}

std::string memory_problem(const TrainConfig& cfg, const LaunchInfo& launch, const PlanOf& plan_of) {
  const bool on_cpu = cfg.device == "cpu" || (cfg.device == "auto" && !torch::cuda::is_available());
  if (!on_cpu) return "";  // (a GPU's free memory is not checked yet)
  TrainConfig resolved = cfg;
  if (!cfg.dtype_given) resolved.dtype = Precision::kFP32;  // what run() picks on the CPU
  const MeshCoords here = coords_of(MeshShape{cfg.dp, cfg.pp, cfg.cp, cfg.tp}, launch.rank);
  const double need = estimate_memory(resolved, here, plan_of(here)).peak_bytes();
  const int ranks_here = std::max(1, launch.local_world_size);
  const double available = double(available_memory_bytes()) / ranks_here;
  if (available <= 0 || need <= available) return "";
  return "this rank needs about " + human_bytes(need) + " of memory (--dry-run shows where it goes) but " +
         human_bytes(available) + " is available to it (MemAvailable / " + std::to_string(ranks_here) +
         " rank(s) on this node): lower --micro-batch-size or --seq-len, use --recompute, --zero or more --tp/--pp "
         "ranks, or a smaller --model";
}

std::string config_mismatch(const std::optional<TrainConfig>& config, const LaunchInfo& launch,
                            const Distributed& dist) {
  if (launch.world_size == 1) return "";
  std::vector<std::pair<std::string, std::string>> fields;
  if (config) fields = config_fields(*config);
  // [parsed?, hash of each setting's text]; a rank whose flags did not parse sends zeros.
  std::vector<uint64_t> mine(1 + config_fields(TrainConfig{}).size(), 0);
  mine[0] = config ? 1 : 0;
  for (size_t i = 0; i < fields.size(); ++i) mine[i + 1] = fnv1a64(fields[i].second.data(), fields[i].second.size());
  const int timeout = config ? config->timeout_s : TrainConfig{}.timeout_s;
  const auto all = dist.all_gather(mine, std::chrono::seconds(timeout));
  if (dist.has_mpi() && all.empty())
    return "some rank did not reach the start-up check within --timeout-s " + std::to_string(timeout) + " s";
  for (int r = 0; r < launch.world_size && !all.empty(); ++r) {
    const uint64_t* theirs = all.data() + size_t(r) * mine.size();
    if (theirs[0] == 0 || mine[0] == 0) continue;  // a rank whose flags did not parse says so itself
    for (size_t i = 0; i < fields.size(); ++i)
      if (theirs[i + 1] != mine[i + 1])
        return "the ranks were given different configurations: " + fields[i].first + " is '" + fields[i].second +
               "' on rank " + std::to_string(launch.rank) + " but not on rank " + std::to_string(r) +
               " (every rank must get the same flags)";
  }
  return "";
}

}  // namespace picotron
