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

}  // namespace picotron::checkpoint_format
