// runtime/preflight/run_dir.cpp — see run_dir.h.
#include "runtime/preflight/run_dir.h"

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "runtime/output/output_file.h"
#include "runtime/cli/flags.h"
#include "runtime/observe/explain.h"
#include "runtime/planner/memory_estimate.h"

namespace picotron {

namespace fs = std::filesystem;

void apply_run_dir(TrainConfig& cfg, int argc, const char* const* argv) {
  if (cfg.run_dir.empty()) return;
  cfg.command_line.clear();
  for (int i = 0; i < argc; ++i) cfg.command_line += (i ? " " : "") + std::string(argv[i]);
  const std::string d = cfg.run_dir + "/";
  if (cfg.metrics_file.empty()) cfg.metrics_file = d + "metrics.jsonl";
  if (cfg.memory_trace.empty()) cfg.memory_trace = d + "memory.jsonl";
  if (cfg.pp_trace.empty() && cfg.pp > 1) cfg.pp_trace = d + "pp_trace.json";
  if (cfg.flight_recorder.empty()) {  // the hang report's verdict, for a run that went well too
    cfg.flight_recorder = d + "flight";
    cfg.flight_dump_at_end = true;
  }
  if (cfg.profile.empty() && cfg.profile_first > 0) cfg.profile = d + "profile";  // --profile-steps alone
}

std::string prepare_run_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return "--run-dir " + dir + ": is a file, not a folder (give a folder; the file is left as it is)";
  fs::create_directories(dir, ec);
  if (ec) return "--run-dir " + dir + ": cannot create the folder: " + ec.message();
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "--run-dir " + dir + ": the folder is not writable";
  return "";
}

void write_run_start(const TrainConfig& cfg, const MeshShape& shape,
                     const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of, const std::string& device,
                     const std::string& launcher) {
  write_file("--run-dir", cfg.run_dir + "/command.txt", cfg.command_line + "\n");
  RunConfig flags_of;  // every flag's value, as --help names them (the planner's own: their defaults)
  static_cast<TrainConfig&>(flags_of) = cfg;
  nlohmann::ordered_json flags = nlohmann::ordered_json::object();
  for (const auto& [flag, value] : config_fields(flags_of)) flags[flag] = value;
  write_file("--run-dir", cfg.run_dir + "/config.json", flags.dump(1) + "\n");
  const LlamaConfig& m = cfg.llama;
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array(), estimate = nlohmann::ordered_json::array();
  for (int r = 0; r < shape.world_size(); ++r) {
    const MeshCoords c = coords_of(shape, r);
    const ShardPlan plan = shard_plan_of(c);
    ranks.push_back({{"rank", r}, {"dp", c.dp}, {"pp", c.pp}, {"cp", c.cp}, {"tp", c.tp},
                     {"holds", holdings(cfg, shape, c, plan)}});
    const MemoryEstimate e = estimate_memory(cfg, c, plan);
    nlohmann::ordered_json parts = nlohmann::ordered_json::array();
    for (const MemoryLine& l : e.state) parts.push_back({{"name", l.name}, {"bytes", l.bytes}, {"formula", l.formula}});
    for (const MemoryLine* l : {&e.activations, &e.hpz_parts, &e.transient})
      if (l->bytes > 0) parts.push_back({{"name", l->name}, {"bytes", l->bytes}, {"formula", l->formula}});
    estimate.push_back({{"rank", r}, {"parts", parts}, {"peak_bytes", e.peak_bytes()}});
  }
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  const nlohmann::ordered_json run = {
      {"mesh", {{"dp", shape.dp}, {"pp", shape.pp}, {"cp", shape.cp}, {"tp", shape.tp}}},
      {"ranks", ranks},
      {"model", {{"preset", cfg.model}, {"hidden_size", m.hidden_size}, {"intermediate_size", m.intermediate_size},
                 {"num_hidden_layers", m.num_hidden_layers}, {"num_attention_heads", m.num_attention_heads},
                 {"num_key_value_heads", m.num_key_value_heads}, {"vocab_size", m.vocab_size},
                 {"num_local_experts", m.num_local_experts}, {"dtype", precision_name(cfg.dtype)},
                 {"seq_len", cfg.seq_len}, {"micro_batch_size", cfg.micro_batch_size},
                 {"grad_acc_steps", cfg.grad_acc_steps}, {"steps", cfg.steps}}},
      {"machine", {{"host", host}, {"device", device}, {"launcher", launcher}, {"processes", shape.world_size()},
                   {"cores", std::thread::hardware_concurrency()}}}};
  write_file("--run-dir", cfg.run_dir + "/run.json", run.dump(1) + "\n");
  write_file("--run-dir", cfg.run_dir + "/estimate.json", nlohmann::ordered_json{{"ranks", estimate}}.dump(1) + "\n");
}

void write_rank_end(const std::string& dir, Comm& world, int64_t steps, int64_t peak_bytes) {
  const auto& listeners = *world.listeners();
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const CommGroup& g : listeners.groups()) {
    nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
    for (const auto& [kind, n] : listeners.ledger(g.id))
      if (n.calls > 0) kinds[kind] = {{"calls", n.calls}, {"elements", n.elements}};
    groups.push_back({{"name", g.name}, {"size", g.size}, {"world_ranks", g.world_ranks}, {"ledger", kinds}});
  }
  const nlohmann::ordered_json doc = {{"rank", world.rank()}, {"steps", steps}, {"peak_mem_bytes", peak_bytes},
                                      {"groups", groups}};
  write_file("--run-dir", dir + "/rank-" + std::to_string(world.rank()) + ".json", doc.dump(1) + "\n");
}

}  // namespace picotron
