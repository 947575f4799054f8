// picotron/checkpoint.cpp — see checkpoint.h.
#include "picotron/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace picotron {

void save_tensors(const std::string& path, const NamedTensors& tensors) {
  torch::serialize::OutputArchive archive;
  std::string names;  // the archive cannot list its keys: store them, newline-separated
  for (const auto& [name, t] : tensors) {
    archive.write(name, t.detach().cpu());
    names += name + "\n";
  }
  archive.write("__names__", torch::tensor(std::vector<int64_t>(names.begin(), names.end())));
  try {
    archive.save_to(path);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write parameter file " + path + ": " + e.what());
  }
}

std::map<std::string, torch::Tensor> load_tensors(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("parameter file " + path + ": no such file");
  torch::serialize::InputArchive archive;
  std::map<std::string, torch::Tensor> out;
  try {
    archive.load_from(path);
    torch::Tensor names_tensor;
    archive.read("__names__", names_tensor);
    std::string names;
    auto chars = names_tensor.accessor<int64_t, 1>();
    for (int64_t i = 0; i < chars.size(0); ++i) names.push_back(char(chars[i]));
    size_t start = 0;
    for (size_t end; (end = names.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string name = names.substr(start, end - start);
      torch::Tensor t;
      archive.read(name, t);
      out[name] = t;
    }
  } catch (const std::exception& e) {
    std::string msg = e.what();
    throw std::runtime_error("parameter file " + path + " is corrupt or not a picotron file: " +
                             msg.substr(0, msg.find('\n')));
  }
  return out;
}

void load_parameters(torch::nn::Module& module, const NamedTensors& full) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(full.begin(), full.end());
  for (auto& item : module.named_parameters()) {
    const auto it = by_name.find(item.key());
    TORCH_CHECK(it != by_name.end(), "load_parameters: no tensor for ", item.key());
    TORCH_CHECK(it->second.sizes() == item.value().sizes(), "load_parameters: ", item.key(), " is ",
                item.value().sizes(), ", the tensor given is ", it->second.sizes());
    item.value().copy_(it->second);
  }
}

// The pieces rank `r` sends to rank 0: its records whose copy counts, in name order.
static std::vector<ShardRecord> pieces_of(const MeshShape& shape, int r, const PlanOf& plan_of) {
  const MeshCoords c = coords_of(shape, r);
  std::vector<ShardRecord> pieces;
  for (const auto& [name, record] : plan_of(c))
    if (record.counts_once(c)) pieces.push_back(record);
  return pieces;
}

static int64_t total_numel(const std::vector<ShardRecord>& pieces) {
  int64_t n = 0;
  for (const auto& p : pieces) n += p.local_numel();
  return n;
}

NamedTensors gather_full_tensors(const std::map<std::string, torch::Tensor>& local, const LlamaConfig& config,
                                 const MeshShape& shape, const PlanOf& plan_of, torch::ScalarType dtype, Comm& world) {
  torch::NoGradGuard no_grad;
  const auto wire = torch::TensorOptions().dtype(dtype).device(world.device());  // what travels
  if (world.rank() != 0) {
    std::vector<torch::Tensor> parts;  // this rank's counted pieces, flattened, in name order
    for (const auto& piece : pieces_of(shape, world.rank(), plan_of))
      parts.push_back(local.at(piece.name).detach().to(wire).reshape({-1}));
    if (!parts.empty()) world.send(torch::cat(parts), /*peer=*/0);  // [sum of local numels]
    return {};
  }
  std::map<std::string, torch::Tensor> full;
  std::map<std::string, int64_t> covered;  // elements received per parameter
  for (const auto& [name, full_shape] : parameter_shapes(config)) {
    full[name] = torch::empty(full_shape, torch::TensorOptions().dtype(dtype));
    covered[name] = 0;
  }
  for (int r = 0; r < shape.world_size(); ++r) {
    const auto pieces = pieces_of(shape, r, plan_of);
    if (pieces.empty()) continue;
    torch::Tensor flat;  // [sum of rank r's counted numels]
    if (r == 0) {
      std::vector<torch::Tensor> parts;
      for (const auto& piece : pieces) parts.push_back(local.at(piece.name).detach().to(wire).reshape({-1}));
      flat = torch::cat(parts);
    } else {
      flat = torch::empty({total_numel(pieces)}, wire);
      world.recv(flat, /*peer=*/r);
    }
    flat = flat.cpu();
    int64_t offset = 0;
    for (const auto& piece : pieces) {
      auto dst = full.at(piece.name);
      if (piece.is_split()) dst = dst.narrow(piece.split_dim, piece.slice().offset, piece.slice().length);
      dst.copy_(flat.narrow(0, offset, piece.local_numel()).view(piece.local_shape()));
      offset += piece.local_numel();
      covered[piece.name] += piece.local_numel();
    }
  }
  NamedTensors out;
  for (const auto& [name, full_shape] : parameter_shapes(config)) {
    TORCH_CHECK(covered[name] == full.at(name).numel(), "gather: the plans cover ", covered[name], " of the ",
                full.at(name).numel(), " elements of ", name, " (a piece missing or counted twice)");
    out.emplace_back(name, full.at(name));
  }
  return out;
}

}  // namespace picotron
