// runtime/checkpoint/resume_load.cpp — see resume.h: finding a checkpoint, reading its pieces on
// any mesh, and putting them into the optimizer. Writing one: resume.cpp.
#include "runtime/checkpoint/resume.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "runtime/checkpoint/checkpoint_check.h"
#include "runtime/checkpoint/checkpoint_format.h"
#include "picotron/distributed.h"
#include "runtime/launch/job_exit.h"
#include "runtime/output/output_file.h"
#include "picotron/dtype.h"
#include "picotron/format.h"
#include "runtime/observe/measure.h"

namespace picotron {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_format;

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;  // (fs::exists throws for a name the OS refuses, e.g. too long)
  const bool exists = fs::exists(path, ec);
  if (ec) throw std::runtime_error("--resume " + path.substr(0, 200) + ": " + ec.message());
  if (!exists) throw std::runtime_error("--resume " + path + ": no such directory");
  if (fs::exists(fs::path(path) / "manifest.json")) return path;
  const auto steps = finished_steps(path);
  if (steps.empty())
    throw std::runtime_error("--resume " + path + ": no checkpoint there (no step-NNNNNN directory with a manifest.json)");
  return (fs::path(path) / step_name(steps.back())).string();
}

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  const fs::path path = fs::path(dir) / "manifest.json";
  if (!fs::exists(path))
    throw std::runtime_error("checkpoint " + dir + ": no manifest.json (not a checkpoint, or its save did not finish)");
  std::ifstream in = open_input_file("checkpoint " + dir + ": manifest.json", path.string());
  try {
    manifest_ = parse_json(in, "checkpoint " + dir + ": manifest.json");
    if (manifest_.value("format", "") != kFormat)
      throw std::runtime_error("format is '" + manifest_.value("format", "") + "', not " + kFormat);
    for (const char* field : {"step", "adam_steps", "loss_scale", "config", "tensors", "files"})
      if (!manifest_.contains(field)) throw std::runtime_error(std::string("no field '") + field + "'");
    for (const char* field : {"step", "adam_steps"})  // counters: integers >= 0
      if (!manifest_.at(field).is_number_integer() || manifest_.at(field).get<int64_t>() < 0)
        throw std::runtime_error(std::string(field) + " must be an integer >= 0, got " + manifest_.at(field).dump());
    if (!manifest_.at("loss_scale").is_number() || !(manifest_.at("loss_scale").get<double>() > 0))
      throw std::runtime_error("loss_scale must be a number > 0, got " + manifest_.at("loss_scale").dump());
    // Its own checksum (resume.cpp): the tensors' bytes have theirs; this covers the rest
    // (counters, dtypes, shapes, the config), which an edit would otherwise slip past.
    if (!manifest_.contains("manifest_fnv1a64") || !manifest_.at("manifest_fnv1a64").is_string())
      throw std::runtime_error("no manifest checksum (manifest_fnv1a64): edited, or saved by an older picotron");
    json body = manifest_;
    body.erase("manifest_fnv1a64");
    const std::string text = body.dump();
    const SumMatch sum = match_fnv1a64(text.data(), text.size(), manifest_.at("manifest_fnv1a64").get<std::string>());
    if (sum == SumMatch::kNone) throw std::runtime_error("checksum mismatch: the manifest was edited or damaged after the save");
    older_sums_ = sum == SumMatch::kOlder;  // saved before the standard FNV-1a basis (safetensors.h)
    // The counters agree with each other and with the directory's name (step-NNNNNN).
    const int64_t step = manifest_.at("step").get<int64_t>();
    if (manifest_.at("adam_steps").get<int64_t>() > step)
      throw std::runtime_error("adam_steps " + manifest_.at("adam_steps").dump() + " exceeds step " + std::to_string(step));
    const std::string leaf = fs::path(dir).lexically_normal().filename().string();
    if (leaf.rfind("step-", 0) == 0 && leaf.find_first_not_of("0123456789", 5) == std::string::npos && leaf.size() > 5 &&
        std::stoll(leaf.substr(5)) != step)
      throw std::runtime_error("step " + std::to_string(step) + " is not the directory's (" + leaf + ")");
    // Files are named inside the checkpoint directory: no paths that lead out of it.
    for (const auto& name : manifest_.at("files"))
      if (!name.is_string() || name.get<std::string>().find('/') != std::string::npos ||
          name.get<std::string>().rfind("..", 0) == 0)
        throw std::runtime_error("file " + name.dump() + " is not a file name inside the checkpoint");
  } catch (const std::exception& e) {
    throw std::runtime_error(path.string() + ": corrupt: " + std::string(e.what()).substr(0, 160));
  }
  for (const auto& name : manifest_.at("files"))  // a damaged checkpoint is named, needed file or not
    if (!fs::exists(fs::path(dir) / name.get<std::string>()))
      throw std::runtime_error((fs::path(dir) / name.get<std::string>()).string() + ": no such file (the manifest lists it)");
}

TrainingCounters CheckpointReader::counters() const {
  TrainingCounters c;
  c.step = manifest_.at("step").get<int64_t>();
  c.adam_steps = manifest_.at("adam_steps").get<int64_t>();
  c.loss_scale = manifest_.at("loss_scale").get<double>();
  c.loss_scale_clean_steps = manifest_.value("loss_scale_clean_steps", int64_t(0));
  return c;
}

const SafetensorsFile& CheckpointReader::file(const std::string& name) {
  auto& f = files_[name];
  if (!f) f = std::make_unique<SafetensorsFile>((fs::path(dir_) / name).string());
  return *f;
}

torch::Tensor CheckpointReader::read(const std::string& key, const ShardRecord& record, int64_t first, int64_t length) {
  const auto& tensors = manifest_.at("tensors");
  if (!tensors.contains(key))
    throw std::runtime_error("checkpoint " + dir_ + ": the manifest lists no tensor '" + key + "', which this model needs");
  const auto& entry = tensors.at(key);
  const auto full_shape = entry.at("full_shape").get<std::vector<int64_t>>();
  if (full_shape != record.full_shape)
    throw std::runtime_error("checkpoint " + dir_ + ": tensor '" + key + "' is " + c10::str(c10::IntArrayRef(full_shape)) +
                             " there, " + c10::str(c10::IntArrayRef(record.full_shape)) + " in this model");
  const Slice mine = record.slice();
  const std::string box = std::to_string(record.split_dim) + ":" + std::to_string(mine.offset);
  auto box_of = [](const torch::Tensor& full, int dim, int64_t offset, int64_t len) {
    return dim >= 0 ? full.narrow(dim, offset, len) : full;
  };
  if (cached_key_ != key || cached_box_ != box) {  // rebuild it from the pieces that overlap my box
    const auto dtype = scalar_type_of_safetensors(entry.at("dtype").get<std::string>());
    auto full = torch::zeros(full_shape, torch::TensorOptions().dtype(dtype));
    auto covered = torch::zeros(full_shape, torch::TensorOptions().dtype(torch::kInt8));
    for (const auto& p : entry.at("pieces")) {
      const int dim = p.at("split_dim").get<int>();
      const int64_t offset = p.at("offset").get<int64_t>(), len = p.at("length").get<int64_t>();
      if (dim >= 0 && dim == record.split_dim && (offset + len <= mine.offset || mine.offset + mine.length <= offset))
        continue;  // another tp rank's slice: not read
      const std::string fname = p.at("file").get<std::string>();
      if (fname.find('/') != std::string::npos || fname.rfind("..", 0) == 0)
        throw std::runtime_error("checkpoint " + dir_ + ": tensor '" + key + "' names file '" + fname +
                                 "', which is not inside the checkpoint");
      const SafetensorsFile& f = file(fname);
      const torch::Tensor data = f.read(key);  // [flat_length]
      if (data.scalar_type() != dtype)  // (verify_checkpoint names it first; this is the last guard)
        throw std::runtime_error(f.path() + ": tensor '" + key + "' is " + safetensors_dtype(data.scalar_type()) +
                                 " in the file's header, " + entry.at("dtype").get<std::string>() + " in the manifest");
      const bool verified = std::find(verified_.begin(), verified_.end(), fname) != verified_.end();
      const std::string want = p.at("fnv1a64").get<std::string>();
      const std::string got = verified || match_fnv1a64(data, want) != SumMatch::kNone ? want : hex(fnv1a64(data));
      if (want != got)
        throw std::runtime_error(f.path() + ": checksum mismatch in tensor '" + key + "' (the manifest says " + want +
                                 ", the data gives " + got + ")");
      const int64_t flat_first = p.at("flat_first").get<int64_t>(), flat_length = p.at("flat_length").get<int64_t>();
      if (data.numel() != flat_length) throw std::runtime_error(f.path() + ": tensor '" + key + "' has the wrong size");
      for (auto [target, value] : {std::pair{full, data}, std::pair{covered, torch::ones_like(data, torch::kInt8)}}) {
        auto b = box_of(target, dim, offset, len);
        auto flat = b.contiguous().view({-1});  // a copy when the box is a column slice
        flat.narrow(0, flat_first, flat_length).copy_(value.view({-1}));
        b.copy_(flat.view(b.sizes()));
      }
    }
    cached_key_ = key, cached_box_ = box, cached_ = full;
    cached_covered_ = covered;
  }
  auto flat_box = [&](const torch::Tensor& t) {
    auto b = box_of(t, record.split_dim, mine.offset, mine.length).contiguous().view({-1});
    return length < 0 ? b : b.narrow(0, first, length);
  };
  if (!flat_box(cached_covered_).eq(1).all().item<bool>())
    throw std::runtime_error("checkpoint " + dir_ + ": no file holds part of tensor '" + key + "' (a rank file missing "
                             "from the manifest?)");
  return flat_box(cached_);
}

std::vector<std::string> CheckpointReader::incompatibilities(const json& want, std::vector<std::string>* warnings) const {
  const json& have = config();
  std::vector<std::string> problems;
  for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "vocab_size", "tie_word_embeddings", "rope_theta", "rms_norm_eps",
                            "num_local_experts", "num_experts_per_tok"})
    if (have.contains(field) && have.at(field) != want.at(field))  // (older manifests lack the experts' fields)
      problems.push_back("checkpoint " + dir_ + " has " + field + " " + have.at(field).dump() + ", the flags ask for " +
                         want.at(field).dump());
  for (const char* field : {"steps", "lr", "warmup_steps", "min_lr", "weight_decay", "beta1", "beta2", "seed", "data",
                            "seq_len", "global_batch_rows", "dtype"})
    if (warnings && have.contains(field) && have.at(field) != want.at(field))
      warnings->push_back("warning: the checkpoint was trained with " + std::string(field) + " " + have.at(field).dump() +
                          ", this run uses " + want.at(field).dump());
  return problems;
}

void load_state(CheckpointReader& reader, Optimizer& optimizer) {
  OptimizerState& state = state_of(optimizer, "--resume");
  state.load_state([&](const std::string& key, const ShardRecord& record, int64_t first, int64_t length) {
    return reader.read(key, record, first, length);
  });
  state.set_steps_taken(reader.counters().adam_steps);
}


// --resume: every rank checks the whole checkpoint (checkpoint_check.h), then loads its
// pieces; any rank's problem (a missing or corrupt file, a different model) stops every
// rank with its line, together, before any step. Returns the step to start at.
int64_t resume_run(const CheckpointSettings& settings, int64_t end_step, Optimizer& optimizer, LossScaler& scaler, Comm& world,
                   Distributed& dist) {
  const Timer clock;
  std::string problem, where;
  std::vector<std::string> warnings;
  TrainingCounters counters;
  auto stop_if_any_rank_failed = [&] {
    const std::string shared = problem_of_any_rank(problem, world);
    if (shared.empty()) return;
    report_error(dist.rank(), shared);
    exit_together(dist, 2, std::chrono::seconds(30));
  };
  std::unique_ptr<CheckpointReader> reader;
  double check_seconds = 0;
  try {  // 1. the checkpoint against the flags, and every file against the manifest
    where = resolve_checkpoint(settings.resume);
    reader = std::make_unique<CheckpointReader>(where);
    const auto bad = reader->incompatibilities(settings.run, &warnings);
    for (const auto& b : bad) problem += (problem.empty() ? "" : "; ") + b;
    counters = reader->counters();
    if (problem.empty() && counters.step >= end_step)
      problem = "--resume " + where + " is at step " + std::to_string(counters.step) + ", and this run stops at step " +
                std::to_string(end_step) + ": nothing to train (raise --steps)";
    const Timer check;
    if (problem.empty()) verify_checkpoint(*reader, world.rank(), world.size());  // my share of the checksums
    check_seconds = check.seconds();
  } catch (const std::exception& e) {
    problem = e.what();
  }
  stop_if_any_rank_failed();
  try {  // 2. this rank's pieces
    load_state(*reader, optimizer);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  stop_if_any_rank_failed();
  scaler.restore(counters.loss_scale, int(counters.loss_scale_clean_steps));
  if (dist.rank() == 0) {
    for (const auto& w : warnings) std::cout << w << std::endl;
    std::cout << "resumed from " << where << ": step " << counters.step << " of " << settings.steps << " ("
              << seconds_text(clock.seconds()) << ", of which checking every file " << seconds_text(check_seconds) << ")"
              << std::endl;
  }
  return counters.step;
}

int64_t start_checkpoints(const CheckpointSettings& settings, int64_t end_step, Optimizer& optimizer,
                          LossScaler& scaler, Comm& world, Distributed& dist) {
  if (!settings.save_dir.empty()) state_of(optimizer, "--save-dir");  // an optimizer without a state view cannot be saved
  if (!settings.save_dir.empty() && world.rank() == 0) lock_save_dir(settings.save_dir);  // one run per --save-dir at a time
  return settings.resume.empty() ? 0 : resume_run(settings, end_step, optimizer, scaler, world, dist);
}

}  // namespace picotron
