// runtime/checkpoint/checkpoint_check.cpp — see checkpoint_check.h.
#include "runtime/checkpoint/checkpoint_check.h"

#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "picotron/distributed.h"
#include "picotron/shard.h"
#include "picotron/format.h"
#include "runtime/observe/measure.h"
#include "runtime/checkpoint/checkpoint_format.h"

namespace picotron {

namespace fs = std::filesystem;
using nlohmann::json;
using checkpoint_format::hex;

namespace {

// What the manifest says one file holds: key -> (dtype, [flat_length], checksum).
struct Expected {
  std::string dtype;
  int64_t flat_length = 0;
  std::string fnv1a64;
};

// The manifest's own numbers: shapes that can exist, pieces inside their tensor, files it
// lists. (Its checksum, checked on opening, makes an edit unlikely; this makes a crafted
// one a line of ours instead of a library error.) Returns what each file must hold.
std::map<std::string, std::map<std::string, Expected>> expected_by_file(const json& manifest) {
  std::map<std::string, std::map<std::string, Expected>> out;
  for (const auto& f : manifest.at("files")) out[f.get<std::string>()];
  for (const auto& [key, t] : manifest.at("tensors").items()) {
    const std::string where = "tensor '" + key + "'";
    try {
      const std::string dtype = t.at("dtype").get<std::string>();
      scalar_type_of_safetensors(dtype);  // throws for a dtype it does not know
      const auto full = t.at("full_shape").get<std::vector<int64_t>>();
      int64_t numel = 1;
      for (int64_t d : full)
        if (d < 0 || __builtin_mul_overflow(numel, d, &numel))
          throw std::runtime_error("impossible full_shape " + shape_text(full));
      for (const auto& p : t.at("pieces")) {
        const std::string file = p.at("file").get<std::string>();
        if (!out.count(file)) throw std::runtime_error("a piece is in '" + file + "', which the manifest's files do not list");
        const int dim = p.at("split_dim").get<int>();
        const int64_t offset = p.at("offset").get<int64_t>(), length = p.at("length").get<int64_t>();
        const int64_t first = p.at("flat_first").get<int64_t>(), count = p.at("flat_length").get<int64_t>();
        if (dim < -1 || dim >= int(full.size()))
          throw std::runtime_error("split_dim " + std::to_string(dim) + " of a tensor of " + shape_text(full));
        int64_t box = numel;  // elements of the piece's box
        if (dim >= 0) {
          if (offset < 0 || length < 0 || offset + length > full[dim])
            throw std::runtime_error("box [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                                     ") of dim " + std::to_string(dim) + " is outside " + shape_text(full));
          box = full[dim] == 0 ? 0 : numel / full[dim] * length;
        }
        if (first < 0 || count < 0 || first + count > box)
          throw std::runtime_error("range [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                   ") is outside its box of " + std::to_string(box) + " elements");
        if (out[file].count(key)) throw std::runtime_error("two pieces in " + file);
        out[file][key] = {dtype, count, p.at("fnv1a64").get<std::string>()};
      }
    } catch (const json::exception& e) {
      throw std::runtime_error(where + ": corrupt entry (" + std::string(e.what()).substr(0, 100) + ")");
    } catch (const std::exception& e) {
      throw std::runtime_error(where + ": " + e.what());
    }
  }
  return out;
}

// The model the manifest's config describes: its parameters and their full shapes are what
// --resume builds and compares every tensor with, so a config that disagrees with its own
// tensors is found here, not at the resume. Keys are "<parameter>/<state>" (optim.h).
void check_config_against_tensors(const json& manifest) {
  const json& c = manifest.at("config");
  LlamaConfig m;
  try {
    m.hidden_size = c.at("hidden_size").get<int64_t>();
    m.intermediate_size = c.at("intermediate_size").get<int64_t>();
    m.num_hidden_layers = c.at("num_hidden_layers").get<int64_t>();
    m.num_attention_heads = c.at("num_attention_heads").get<int64_t>();
    m.num_key_value_heads = c.at("num_key_value_heads").get<int64_t>();
    m.vocab_size = c.at("vocab_size").get<int64_t>();
    m.tie_word_embeddings = c.at("tie_word_embeddings").get<bool>();
    m.num_local_experts = c.value("num_local_experts", int64_t(0));
  } catch (const json::exception& e) {
    throw std::runtime_error("config: " + std::string(e.what()).substr(0, 100));
  }
  if (m.hidden_size <= 0 || m.num_attention_heads <= 0 || m.num_key_value_heads <= 0 || m.num_hidden_layers < 0 ||
      m.hidden_size % m.num_attention_heads || m.num_attention_heads % m.num_key_value_heads || m.vocab_size <= 0 ||
      m.intermediate_size <= 0 || m.num_local_experts < 0)
    throw std::runtime_error("config: not a model (" + c.dump().substr(0, 200) + ")");
  // (A manifest saved before the config named its experts: only the shapes of the names a
  // dense model has are checked.)
  const bool complete = c.contains("num_local_experts");
  const ShardPlan model = replicated_plan(m);
  const std::string described = "the config's model (hidden_size " + std::to_string(m.hidden_size) + ", intermediate_size " +
                                std::to_string(m.intermediate_size) + ", layers " + std::to_string(m.num_hidden_layers) +
                                ", vocab " + std::to_string(m.vocab_size) + ")";
  std::set<std::string> seen;
  for (const auto& [key, t] : manifest.at("tensors").items()) {
    const std::string name = key.substr(0, key.rfind('/'));
    const auto it = model.find(name);
    if (it == model.end()) {
      if (complete) throw std::runtime_error("tensor '" + key + "' is not a parameter of " + described);
      continue;
    }
    seen.insert(name);
    const auto shape = t.at("full_shape").get<std::vector<int64_t>>();
    if (shape != it->second.full_shape)
      throw std::runtime_error("tensor '" + key + "' is " + shape_text(shape) + ", but " + described + " makes it " +
                               shape_text(it->second.full_shape));
  }
  if (complete)
    for (const auto& [name, record] : model)
      if (!seen.count(name)) throw std::runtime_error("parameter '" + name + "' of " + described + " has no tensor here");
}

}  // namespace

CheckpointReport verify_checkpoint(CheckpointReader& reader, int rank, int ranks) {
  const std::string ckpt = "checkpoint " + reader.path() + ": ";
  CheckpointReport report;
  report.path = reader.path();
  report.counters = reader.counters();
  report.config = reader.config();
  report.world_size = reader.manifest().value("world_size", int(reader.manifest().at("files").size()));
  std::map<std::string, std::map<std::string, Expected>> expected;
  try {
    expected = expected_by_file(reader.manifest());
    check_config_against_tensors(reader.manifest());
  } catch (const std::exception& e) {
    throw std::runtime_error(ckpt + "manifest.json: " + e.what());
  }
  int index = 0;
  for (const auto& name_json : reader.manifest().at("files")) {
    const std::string name = name_json.get<std::string>();
    const std::string at = ckpt + name + ": ";
    const bool hash = index++ % ranks == rank;
    std::unique_ptr<SafetensorsFile> file;
    try {
      file = std::make_unique<SafetensorsFile>((fs::path(reader.path()) / name).string());
    } catch (const std::exception& e) {  // its own message names the path: "<D>/<file>: ..."
      throw std::runtime_error(e.what());
    }
    const auto& want = expected.at(name);
    for (const auto& [key, entry] : file->entries()) {
      const auto it = want.find(key);
      if (it == want.end())
        throw std::runtime_error(at + "tensor '" + key + "' is not one the manifest puts in this file (a file of another run?)");
      const std::string dtype = safetensors_dtype(entry.dtype);
      if (dtype != it->second.dtype)
        throw std::runtime_error(at + "tensor '" + key + "' is " + dtype + " in the file's header, " + it->second.dtype +
                                 " in the manifest");
      if (entry.shape != std::vector<int64_t>{it->second.flat_length})
        throw std::runtime_error(at + "tensor '" + key + "' is " + shape_text(entry.shape) + " in the file's header, [" +
                                 std::to_string(it->second.flat_length) + "] in the manifest");
    }
    for (const auto& [key, piece] : want)
      if (!file->contains(key))
        throw std::runtime_error(at + "tensor '" + key + "' is missing (the manifest puts it in this file)");
    if (hash) {
      for (const auto& [key, piece] : want) {
        const torch::Tensor data = file->read(key);
        if (match_fnv1a64(data, piece.fnv1a64) == SumMatch::kNone)
          throw std::runtime_error(at + "checksum mismatch in tensor '" + key + "' (the manifest says " + piece.fnv1a64 +
                                   ", the data gives " + hex(fnv1a64(data)) + ")");
      }
      reader.mark_verified(name);
    }
    const int64_t bytes = int64_t(fs::file_size(fs::path(reader.path()) / name));
    report.files.push_back({name, bytes, int64_t(want.size())});
  }
  report.bytes = directory_bytes(reader.path());
  report.older_checksums = reader.older_checksums();
  return report;
}

std::string checkpoint_report_text(const CheckpointReport& r, double seconds) {
  const json& c = r.config;
  const json mesh = c.value("mesh", json::object());
  int64_t tensors = 0;
  for (const auto& f : r.files) tensors += f.tensors;
  std::ostringstream o;
  o << "checkpoint " << r.path << ": ok (" << tensors << " tensors in " << r.files.size()
    << " file(s) match the manifest: name, dtype, shape, checksum; the tensors' shapes are the config's model's; "
    << seconds_text(seconds) << ")\n";
  if (r.older_checksums)
    o << "  checksums: FNV-1a 64 with the older offset basis 1469598103934665603 (saved before 2026-11-28; new saves use the "
         "standard 14695981039346656037)\n";
  o << "  step " << r.counters.step << " of " << c.value("steps", int64_t(0)) << " (AdamW steps " << r.counters.adam_steps
    << ", loss scale " << r.counters.loss_scale << ")\n";
  o << "  mesh: dp " << mesh.value("dp", 1) << ", tp " << mesh.value("tp", 1) << ", pp " << mesh.value("pp", 1) << ", cp "
    << mesh.value("cp", 1) << ", zero " << mesh.value("zero", 0) << " (" << r.world_size << " rank(s))\n";
  o << "  model: " << c.value("model", std::string("?")) << " (hidden_size " << c.value("hidden_size", 0)
    << ", intermediate_size " << c.value("intermediate_size", 0) << ", layers " << c.value("num_hidden_layers", 0)
    << ", heads " << c.value("num_attention_heads", 0) << "/" << c.value("num_key_value_heads", 0) << ", vocab "
    << c.value("vocab_size", 0) << "), " << c.value("dtype", std::string("?")) << "\n";
  for (const auto& f : r.files) o << "  " << f.name << "  " << human_bytes(double(f.bytes)) << "  " << f.tensors << " tensors\n";
  o << "  total " << human_bytes(double(r.bytes));
  return o.str();
}

int check_checkpoint(const std::string& path, int rank) {
  const Timer clock;
  try {
    std::string dir;
    try {
      dir = resolve_checkpoint(path);
    } catch (const std::exception& e) {  // (its lines name --resume)
      std::string m = e.what();
      if (m.rfind("--resume ", 0) == 0) m.replace(0, 8, "--check-checkpoint");
      throw std::runtime_error(m);
    }
    CheckpointReader reader(dir);
    const CheckpointReport report = verify_checkpoint(reader);
    if (rank == 0) std::cout << checkpoint_report_text(report, clock.seconds()) << std::endl;
    return 0;
  } catch (const std::exception& e) {
    report_error(rank, e.what());
    return 2;
  }
}

std::string problem_of_any_rank(const std::string& mine, Comm& world) {
  if (world.size() == 1) return mine;
  constexpr int64_t kChars = 480;  // a line's worth; longer ones are cut
  // [world, kChars]: row r holds rank r's line, one character per element; a sum fills
  // every row on every rank (the others are zero).
  auto lines = torch::zeros({world.size(), kChars}, torch::TensorOptions().dtype(torch::kFloat64));
  auto row = lines[world.rank()];
  for (int64_t i = 0; i < int64_t(mine.size()) && i < kChars; ++i) row[i] = double((unsigned char)mine[i]);
  auto shared = lines.view({-1}).to(world.device());
  world.all_reduce(shared, ReduceOp::kSum);
  lines = shared.cpu().view({world.size(), kChars}).contiguous();
  if (!mine.empty()) return mine;
  const auto chars = lines.accessor<double, 2>();
  for (int r = 0; r < world.size(); ++r) {
    std::string text;
    for (int64_t i = 0; i < kChars; ++i) {
      const auto c = int(chars[r][i]);
      if (c == 0) break;
      text += char(c);
    }
    if (!text.empty()) return text;
  }
  return "";
}

}  // namespace picotron
