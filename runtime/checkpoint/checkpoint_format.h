// runtime/checkpoint/checkpoint_format.h — what a checkpoint directory looks like, shared by the
// code that writes it (resume.cpp) and the code that reads it (resume_load.cpp):
//
//   D/step-000120/manifest.json, D/step-000120/rank-00000.safetensors, ...
//   tensors "<parameter name>/master", "/exp_avg", "/exp_avg_sq"; checksums in hex.
//
// Internal to this room: the user-facing API is runtime/checkpoint/resume.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/cli/train_config.h"

namespace picotron::checkpoint_format {

namespace fs = std::filesystem;
using nlohmann::json;

inline const char* const kFormat = "picotron-checkpoint/1";

inline std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%06lld", (long long)step);
  return name;
}

inline std::string rank_file(int rank) {
  char name[40];
  std::snprintf(name, sizeof name, "rank-%05d.safetensors", rank);
  return name;
}

inline std::string hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", (unsigned long long)v);
  return text;
}

// The steps of the checkpoints in `dir` that finished (renamed into place), oldest first.
inline std::vector<int64_t> finished_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // step-NNNNNN, six digits or more (step 1,000,000 is step-1000000), compared as numbers
    if (name.size() >= 11 && name.rfind("step-", 0) == 0 && name.find_first_not_of("0123456789", 5) == std::string::npos &&
        fs::exists(entry.path() / "manifest.json"))
      steps.push_back(std::stoll(name.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

inline json config_json(const TrainConfig& c) {
  const LlamaConfig& m = c.llama;
  return {{"model", c.model},
          {"hidden_size", m.hidden_size},
          {"intermediate_size", m.intermediate_size},
          {"num_hidden_layers", m.num_hidden_layers},
          {"num_attention_heads", m.num_attention_heads},
          {"num_key_value_heads", m.num_key_value_heads},
          {"vocab_size", m.vocab_size},
          {"rope_theta", m.rope_theta},
          {"max_position_embeddings", m.max_position_embeddings},
          {"rms_norm_eps", m.rms_norm_eps},
          {"tie_word_embeddings", m.tie_word_embeddings},
          {"num_local_experts", m.num_local_experts},
          {"num_experts_per_tok", m.num_experts_per_tok},
          {"dtype", precision_name(c.dtype)},
          {"steps", c.steps},
          {"lr", c.lr},
          {"warmup_steps", c.warmup_steps},
          {"min_lr", c.min_lr},
          {"weight_decay", c.weight_decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"seed", c.seed},
          {"data", c.data},
          {"seq_len", c.seq_len},
          {"global_batch_rows", c.micro_batch_size * c.grad_acc_steps * c.dp},
          {"mesh", {{"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"cp", c.cp}, {"zero", c.zero}}}};
}

}  // namespace picotron::checkpoint_format
