// runtime/preflight/resolve.cpp — see resolve.h.
#include "runtime/preflight/resolve.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <functional>

#include <torch/torch.h>

#include "runtime/checkpoint/hf.h"
#include "runtime/checkpoint/safetensors.h"  // fnv1a64
#include "runtime/cli/flags.h"
#include "runtime/launch/job_exit.h"
#include "runtime/text/tokenizer.h"  // apply_tokenizer

namespace picotron {

namespace fs = std::filesystem;

std::string config_mismatch(const std::optional<RunConfig>& config, const LaunchInfo& launch,
                            const Distributed& dist) {
  if (launch.world_size == 1) return "";
  std::vector<std::pair<std::string, std::string>> fields;
  if (config) fields = config_fields(*config);
  // [parsed?, hash of each setting's text]; a rank whose flags did not parse sends zeros.
  std::vector<uint64_t> mine(1 + config_fields(RunConfig{}).size(), 0);
  mine[0] = config ? 1 : 0;
  for (size_t i = 0; i < fields.size(); ++i) mine[i + 1] = fnv1a64(fields[i].second.data(), fields[i].second.size());
  const int timeout = config ? config->timeout_s : TrainConfig{}.timeout_s;
  const auto all = all_gather_bounded(dist, mine, std::chrono::seconds(timeout));
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

namespace {
// With --init-from, the model's shape is config.json's (a shape flag that disagrees was
// refused already): a rule it breaks is named as config.json's field, not as a flag nobody
// gave. "--num-attention-heads 4 is not divisible by --num-key-value-heads 3" becomes
// "hf/config.json: num_attention_heads 4 is not divisible by num_key_value_heads 3".
std::string blame_config_json(const std::string& problem, const std::string& init_from) {
  static const char* const kShapeFlags[] = {
      "hidden-size",  "intermediate-size", "num-hidden-layers", "num-attention-heads", "num-key-value-heads",
      "vocab-size",   "rope-theta",        "max-position-embeddings", "rms-norm-eps", "tie-word-embeddings",
      "num-local-experts", "num-experts-per-tok", "router-aux-loss-coef"};
  std::string line = problem;
  bool blamed = false;
  for (const char* flag : kShapeFlags) {
    const std::string from = std::string("--") + flag;
    std::string field = flag;
    std::replace(field.begin(), field.end(), '-', '_');
    for (size_t at = line.find(from); at != std::string::npos; at = line.find(from, at + field.size())) {
      const size_t end = at + from.size();
      if (end < line.size() && (std::isalnum((unsigned char)line[end]) || line[end] == '-')) continue;  // a longer flag
      line.replace(at, from.size(), field);
      blamed = true;
    }
  }
  return blamed ? (fs::path(init_from) / "config.json").string() + ": " + line : problem;
}
}  // namespace

namespace {
// `part`'s changes to the config, read off its printed fields (config_fields) before and after.
std::vector<std::string> changes_by(const TrainConfig& cfg, const std::string& why, const std::function<void()>& part) {
  const auto before = config_fields(RunConfig{cfg, {}});
  part();
  const auto after = config_fields(RunConfig{cfg, {}});
  std::vector<std::string> changes;
  for (size_t i = 0; i < before.size() && i < after.size(); ++i)
    if (before[i].second != after[i].second)
      changes.push_back(after[i].first + " " + before[i].second + " -> " + after[i].second + " (" + why + ")");
  return changes;
}
}  // namespace

ResolvedConfig resolve_config(RunConfig& cfg) {
  ResolvedConfig r;
  const auto shape_from_hf = [&] {  // --init-from: the shape comes from its config.json (which the problems name)
    const HfShape hf = read_hf_config({cfg.init_from, cfg.seq_len, cfg.shape_flags, cfg.llama, cfg.model});
    r.problems = hf.problems;
    if (!hf.model) return;
    cfg.llama = *hf.model;
    cfg.model = std::filesystem::path(cfg.init_from).filename().string();
  };
  const auto vocab_from_tokenizer = [&] {  // V follows the data (runtime/text/tokenizer.h)
    const bool vocab_given = std::count(cfg.shape_flags.begin(), cfg.shape_flags.end(), "vocab-size") > 0;
    r.problems = apply_tokenizer({cfg.tokenizer, cfg.data, cfg.init_from, vocab_given, cfg.tp}, cfg.llama);
  };
  if (!cfg.init_from.empty()) r.changes = changes_by(cfg, "config.json", shape_from_hf);
  if (!r.problems.empty()) return r;
  for (auto& c : changes_by(cfg, "the tokenizer", vocab_from_tokenizer)) r.changes.push_back(c);
  return r;
}

std::vector<std::string> resolve_device(TrainConfig& cfg) {
  return changes_by(cfg, "resolved for this machine", [&] {
    if (cfg.device == "auto") cfg.device = torch::cuda::is_available() ? "cuda" : "cpu";
    if (!cfg.dtype_given) cfg.dtype = cfg.device == "cuda" ? Precision::kBF16 : Precision::kFP32;
  });
}

std::vector<std::string> config_problems(const RunConfig& cfg, const LaunchInfo& launch) {
  std::vector<std::string> problems =
      check_flag_rules(cfg, cfg.dry_run ? cfg.dp * cfg.pp * cfg.cp * cfg.tp : launch.world_size);
  if (!cfg.init_from.empty())  // the rules between flags, broken by config.json's values
    for (auto& p : problems) p = blame_config_json(p, cfg.init_from);
  return problems;
}

}  // namespace picotron
