// picotron/resume.cpp — see resume.h.
#include "picotron/resume.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ftw.h>
#include <cerrno>
#include <cstring>

#include "picotron/output_file.h"
#include "zero/zero.h"

namespace picotron {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kKinds[] = {"master", "exp_avg", "exp_avg_sq"};
const char* const kFormat = "picotron-checkpoint/1";

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%06lld", (long long)step);
  return name;
}

std::string rank_file(int rank) {
  char name[40];
  std::snprintf(name, sizeof name, "rank-%05d.safetensors", rank);
  return name;
}

std::string hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", (unsigned long long)v);
  return text;
}

// rm -rf, by hand: libtorch.so exports its own std::filesystem::remove_all, which the
// dynamic linker may pick over libstdc++'s and which crashes on a non-empty directory.
int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }
void remove_tree(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  if (::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    throw std::runtime_error("cannot remove " + path.string() + ": " + std::strerror(errno));
}

// Every rank learns whether any rank failed (a collective: all ranks must call it).
bool all_succeeded(bool ok, Comm& world) {
  auto flag = torch::tensor({ok ? 0.0 : 1.0}, torch::TensorOptions().dtype(torch::kFloat64).device(world.device()));
  world.all_reduce(flag, ReduceOp::kMax);
  return flag.item<double>() == 0.0;
}

// The steps of the checkpoints in `dir` that finished (renamed into place), oldest first.
std::vector<int64_t> finished_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 11 && name.rfind("step-", 0) == 0 && name.find_first_not_of("0123456789", 5) == std::string::npos &&
        fs::exists(entry.path() / "manifest.json"))
      steps.push_back(std::stoll(name.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

json config_json(const TrainConfig& c) {
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

// Test hook: the last rank writes half of its file for this step and kills itself, as a
// job killed mid-save would (tests/checkpoint_tests.cmake: the previous checkpoint resumes).
bool killed_during_save(int64_t step, int rank, int world_size) {
  const char* at = std::getenv("PICOTRON_FAULT_KILL_DURING_SAVE");
  return at && std::atoll(at) == step && rank == world_size - 1;
}

}  // namespace

std::vector<StatePiece> owned_state(const AdamW* adamw, const ZeroOptimizer* zero_const, const MeshCoords& here) {
  std::vector<StatePiece> out;
  if (adamw) {  // whole local tensors; the copy that counts writes (dp, cp, tp replicas skip)
    for (const auto& p : const_cast<AdamW*>(adamw)->params()) {
      if (!p.record.counts_once(here)) continue;
      const torch::Tensor state[] = {p.master, p.exp_avg, p.exp_avg_sq};
      for (int k = 0; k < 3; ++k)
        out.push_back({p.name + "/" + kKinds[k], p.record, 0, state[k].numel(), state[k].reshape({-1})});
    }
    return out;
  }
  // ZeRO: my flat slice of the cp x dp group; tp and pp replicas (norms over tp) skip.
  auto* zero = const_cast<ZeroOptimizer*>(zero_const);
  MeshCoords group_blind = here;
  group_blind.dp = group_blind.cp = 0;
  for (const auto& piece : zero->layout().pieces(zero->group_rank())) {
    const auto& p = zero->params()[piece.param];
    if (!p.record.counts_once(group_blind)) continue;
    const torch::Tensor state[] = {zero->master_piece(piece), zero->exp_avg().narrow(0, piece.slice_offset, piece.length),
                                   zero->exp_avg_sq().narrow(0, piece.slice_offset, piece.length)};
    for (int k = 0; k < 3; ++k) out.push_back({p.name + "/" + kKinds[k], p.record, piece.first, piece.length, state[k]});
  }
  return out;
}

std::string save_checkpoint(const std::string& dir, const TrainConfig& cfg, const TrainingCounters& counters,
                            const std::vector<StatePiece>& owned, Comm& world) {
  const int rank = world.rank();
  const fs::path final_dir = fs::path(dir) / step_name(counters.step);
  const fs::path tmp = fs::path(dir) / (step_name(counters.step) + ".tmp");
  std::string problem;
  // 1. rank 0 makes an empty step-NNNNNN.tmp/
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!ec) try { remove_tree(tmp); } catch (const std::exception&) { ec = std::make_error_code(std::errc::io_error); }
    if (!ec) fs::create_directories(tmp, ec);
    if (ec) problem = "--save-dir " + dir + ": cannot create " + tmp.string() + ": " + ec.message();
  }
  if (!all_succeeded(problem.empty(), world))
    throw std::runtime_error(problem.empty() ? "--save-dir " + dir + ": rank 0 could not create the checkpoint directory"
                                             : problem);
  // 2. every rank writes what it owns, with the pieces described in the file's metadata
  try {
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    json pieces = json::array();
    for (const auto& piece : owned) {
      auto cpu = piece.data.detach().to(torch::kCPU).contiguous();  // [flat_length]
      const auto slice = piece.record.slice();
      pieces.push_back({{"key", piece.key},
                        {"full_shape", piece.record.full_shape},
                        {"split_dim", piece.record.split_dim},
                        {"offset", slice.offset},
                        {"length", slice.length},
                        {"flat_first", piece.flat_first},
                        {"flat_length", piece.flat_length},
                        {"dtype", safetensors_dtype(cpu.scalar_type())},
                        {"fnv1a64", hex(fnv1a64(cpu))}});
      tensors.emplace_back(piece.key, cpu);
    }
    const std::string path = (tmp / rank_file(rank)).string();
    write_safetensors(path, tensors, {{"format", kFormat}, {"pieces", pieces.dump()}}, "--save-dir");
    if (killed_during_save(counters.step, rank, world.size())) {
      fs::resize_file(path, fs::file_size(path) / 2);
      std::raise(SIGKILL);
    }
  } catch (const std::exception& e) {
    problem = std::string("checkpoint ") + final_dir.string() + ": " + e.what();
  }
  if (!all_succeeded(problem.empty(), world))
    throw std::runtime_error(problem.empty() ? "checkpoint " + final_dir.string() + ": another rank could not write its "
                                               "file (see its error)" : problem);
  // 3. rank 0: the manifest from every file's pieces, then the rename: the checkpoint
  //    exists, whole, or not at all
  if (rank == 0) {
    try {
      json manifest = {{"format", kFormat},
                       {"step", counters.step},
                       {"adam_steps", counters.adam_steps},
                       {"loss_scale", counters.loss_scale},
                       {"loss_scale_clean_steps", counters.loss_scale_clean_steps},
                       {"world_size", world.size()},
                       {"config", config_json(cfg)},
                       {"files", json::array()},
                       {"tensors", json::object()}};
      for (int r = 0; r < world.size(); ++r) {
        const SafetensorsFile file((tmp / rank_file(r)).string());
        manifest["files"].push_back(rank_file(r));
        for (auto piece : json::parse(file.metadata().at("pieces"))) {
          auto& tensor = manifest["tensors"][piece.at("key").get<std::string>()];
          tensor["full_shape"] = piece.at("full_shape");
          tensor["dtype"] = piece.at("dtype");
          piece.erase("full_shape");
          piece.erase("dtype");
          piece["file"] = rank_file(r);
          tensor["pieces"].push_back(piece);
        }
      }
      write_file("--save-dir", (tmp / "manifest.json").string(), manifest.dump(1) + "\n");
      remove_tree(final_dir);
      fs::rename(tmp, final_dir);
      // keep the newest --keep-checkpoints; unfinished saves of earlier steps go too
      const auto steps = finished_steps(dir);
      for (size_t i = 0; i + size_t(cfg.keep_checkpoints) < steps.size(); ++i)
        remove_tree(fs::path(dir) / step_name(steps[i]));
      std::vector<fs::path> unfinished;  // (collected first: removing while iterating is undefined)
      for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name.size() == 15 && name.rfind("step-", 0) == 0 && name.substr(11) == ".tmp") unfinished.push_back(entry.path());
      }
      for (const auto& path : unfinished) remove_tree(path);
    } catch (const std::exception& e) {
      problem = "checkpoint " + final_dir.string() + ": " + e.what();
    }
  }
  if (!all_succeeded(problem.empty(), world))
    throw std::runtime_error(problem.empty() ? "checkpoint " + final_dir.string() + ": rank 0 could not finish it" : problem);
  return final_dir.string();
}

int64_t directory_bytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) total += int64_t(entry.file_size());
  return total;
}

std::string resolve_checkpoint(const std::string& path) {
  if (!fs::exists(path)) throw std::runtime_error("--resume " + path + ": no such directory");
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
  try {
    std::ifstream in(path);
    manifest_ = json::parse(in);
    if (manifest_.value("format", "") != kFormat)
      throw std::runtime_error("format is '" + manifest_.value("format", "") + "', not " + kFormat);
    for (const char* field : {"step", "adam_steps", "loss_scale", "config", "tensors", "files"})
      if (!manifest_.contains(field)) throw std::runtime_error(std::string("no field '") + field + "'");
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
      const SafetensorsFile& f = file(fname);
      const torch::Tensor data = f.read(key);  // [flat_length]
      const std::string want = p.at("fnv1a64").get<std::string>(), got = hex(fnv1a64(data));
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

std::vector<std::string> CheckpointReader::incompatibilities(const TrainConfig& cfg, std::vector<std::string>* warnings) const {
  const json have = config(), want = config_json(cfg);
  std::vector<std::string> problems;
  for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "vocab_size", "tie_word_embeddings", "rope_theta", "rms_norm_eps"})
    if (have.at(field) != want.at(field))
      problems.push_back("checkpoint " + dir_ + " has " + field + " " + have.at(field).dump() + ", the flags ask for " +
                         want.at(field).dump());
  for (const char* field : {"steps", "lr", "warmup_steps", "min_lr", "weight_decay", "beta1", "beta2", "seed", "data",
                            "seq_len", "global_batch_rows", "dtype"})
    if (warnings && have.contains(field) && have.at(field) != want.at(field))
      warnings->push_back("warning: the checkpoint was trained with " + std::string(field) + " " + have.at(field).dump() +
                          ", this run uses " + want.at(field).dump());
  return problems;
}

void load_state(CheckpointReader& reader, AdamW* adamw, ZeroOptimizer* zero) {
  torch::NoGradGuard no_grad;
  const TrainingCounters counters = reader.counters();
  if (adamw) {
    for (auto& p : adamw->params()) {
      const torch::Tensor state[] = {p.master, p.exp_avg, p.exp_avg_sq};
      for (int k = 0; k < 3; ++k) state[k].copy_(reader.read(p.name + "/" + kKinds[k], p.record).view(state[k].sizes()));
      if (!p.master.is_same(p.param)) p.param.copy_(p.master);  // bf16/fp16: the rounding a step makes
    }
    adamw->set_steps_taken(counters.adam_steps);
    return;
  }
  // ZeRO: my pieces of master and moments; stages 1 and 2 also keep whole (local) weights,
  // the rounding of the whole master. One parameter and one kind at a time (the reader
  // holds one assembled tensor).
  std::vector<std::vector<ZeroLayout::Piece>> pieces_of(zero->params().size());
  for (const auto& piece : zero->layout().pieces(zero->group_rank())) pieces_of[piece.param].push_back(piece);
  for (size_t i = 0; i < zero->params().size(); ++i) {
    const auto& p = zero->params()[i];
    if (zero->stage() < 3) p.param.copy_(reader.read(p.name + "/master", p.record).view(p.param.sizes()));
    for (const auto& piece : pieces_of[i]) {
      const auto master = reader.read(p.name + "/master", p.record, piece.first, piece.length);
      zero->master_piece(piece).copy_(master);
      if (zero->stage() == 3) zero->weights_piece(piece).copy_(master);  // my shard of the weights
    }
    for (const auto& piece : pieces_of[i])
      zero->exp_avg().narrow(0, piece.slice_offset, piece.length)
          .copy_(reader.read(p.name + "/exp_avg", p.record, piece.first, piece.length));
    for (const auto& piece : pieces_of[i])
      zero->exp_avg_sq().narrow(0, piece.slice_offset, piece.length)
          .copy_(reader.read(p.name + "/exp_avg_sq", p.record, piece.first, piece.length));
  }
  zero->set_steps_taken(counters.adam_steps);
}

}  // namespace picotron
