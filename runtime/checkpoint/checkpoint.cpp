// runtime/checkpoint/checkpoint.cpp — see checkpoint.h.
#include "runtime/checkpoint/checkpoint.h"

#include "runtime/checkpoint/checkpoint_format.h"
#include "picotron/init.h"
#include "runtime/checkpoint/safetensors.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace picotron {

// Each tensor's FNV-1a checksum travels in the file's metadata, "fnv1a64:<name>" -> hex,
// so a payload altered after writing (a bad disk, a bad copy) is found on reading.
static std::string checksum_key(const std::string& name) { return "fnv1a64:" + name; }

void save_tensors(const std::string& path, const NamedTensors& tensors, const std::string& flag) {
  std::map<std::string, std::string> checksums;
  for (const auto& [name, t] : tensors) checksums[checksum_key(name)] = checkpoint_format::hex(fnv1a64(t.detach().to(torch::kCPU).contiguous()));
  write_safetensors(path, tensors, checksums, flag);
}

std::map<std::string, torch::Tensor> load_tensors(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("parameter file " + path + ": no such file");
  std::map<std::string, torch::Tensor> out;
  try {
    const SafetensorsFile file(path);
    for (const auto& [name, entry] : file.entries()) {
      out[name] = file.read(name);
      // Files written elsewhere (Python) may carry no checksums; ours always do.
      const auto it = file.metadata().find(checksum_key(name));
      if (it != file.metadata().end() && match_fnv1a64(out[name], it->second) == SumMatch::kNone)
        throw std::runtime_error(path + ": checksum mismatch in tensor '" + name + "' (the file says " + it->second +
                                 ", the data gives " + checkpoint_format::hex(fnv1a64(out[name])) + ")");
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("parameter file is corrupt or not safetensors: " + std::string(e.what()));
  }
  return out;
}

void load_parameters(torch::nn::Module& module, const NamedTensors& full, const ShardPlan& plan) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(full.begin(), full.end());
  for (auto& item : module.named_parameters()) {
    const auto it = by_name.find(item.key());
    TORCH_CHECK(it != by_name.end(), "load_parameters: no tensor for ", item.key());
    torch::Tensor value = it->second;  // [full_shape]
    if (!plan.empty()) {
      TORCH_CHECK(plan.count(item.key()), "load_parameters: ", item.key(), " has no shard record");
      const ShardRecord& r = plan.at(item.key());
      TORCH_CHECK(value.sizes() == torch::IntArrayRef(r.full_shape), "load_parameters: ", item.key(), " is ",
                  torch::IntArrayRef(r.full_shape), " in full, the tensor given is ", value.sizes());
      value = local_slice(value, r);  // [local_shape]
    }
    TORCH_CHECK(value.sizes() == item.value().sizes(), "load_parameters: ", item.key(), " is ", item.value().sizes(),
                ", the tensor given is ", value.sizes());
    item.value().copy_(value);
  }
}

// The pieces rank `r` sends to rank 0: its records whose copy counts, in name order.
static std::vector<ShardRecord> pieces_of(const MeshShape& shape, int r, const ShardPlanOf& shard_plan_of) {
  const MeshCoords c = coords_of(shape, r);
  std::vector<ShardRecord> pieces;
  for (const auto& [name, record] : shard_plan_of(c))
    if (record.counts_once(c)) pieces.push_back(record);
  return pieces;
}

// This rank's tensor for `piece`, contiguous, as it travels (dtype, device of the Comm).
static torch::Tensor on_the_wire(const std::map<std::string, torch::Tensor>& local, const ShardRecord& piece,
                                 const torch::TensorOptions& wire, int rank) {
  const auto it = local.find(piece.name);
  TORCH_CHECK(it != local.end(), "gather: rank ", rank, " holds no tensor for ", piece.name, ", which its plan lists");
  return it->second.detach().to(wire).contiguous();  // [local_shape]; no copy when it already is
}

NamedTensors gather_full_tensors(const std::map<std::string, torch::Tensor>& local, const LlamaConfig& config,
                                 const MeshShape& shape, const ShardPlanOf& shard_plan_of, torch::ScalarType dtype, Comm& world) {
  torch::NoGradGuard no_grad;
  const int rank = world.rank();
  const auto wire = torch::TensorOptions().dtype(dtype).device(world.device());  // what travels
  if (rank != 0) {  // send every counted piece, one message each, posted together
    std::vector<P2POp> sends;
    for (const auto& piece : pieces_of(shape, rank, shard_plan_of))
      sends.push_back({P2POp::kSend, on_the_wire(local, piece, wire, rank), /*peer=*/0});
    world.batch_p2p(sends);
    return {};
  }
  std::map<std::string, torch::Tensor> full, times_covered;  // per element: how many pieces wrote it
  for (const auto& [name, full_shape] : parameter_shapes(config)) {
    full[name] = torch::empty(full_shape, torch::TensorOptions().dtype(dtype));        // [full_shape], CPU
    times_covered[name] = torch::zeros(full_shape, torch::TensorOptions().dtype(torch::kInt8));
  }
  auto place = [&](const ShardRecord& piece, const torch::Tensor& value) {  // full[name][slice] = value
    TORCH_CHECK(full.count(piece.name), "gather: ", piece.name, " is not a parameter of this model");
    auto dst = full.at(piece.name), seen = times_covered.at(piece.name);
    if (piece.is_split()) {
      dst = dst.narrow(piece.split_dim, piece.slice().offset, piece.slice().length);
      seen = seen.narrow(piece.split_dim, piece.slice().offset, piece.slice().length);
    }
    dst.copy_(value);  // device -> CPU
    seen.add_(1);
  };
  for (int r = 0; r < shape.world_size(); ++r) {
    const auto pieces = pieces_of(shape, r, shard_plan_of);
    if (r == 0) {
      for (const auto& piece : pieces) place(piece, on_the_wire(local, piece, wire, 0));
      continue;
    }
    std::vector<P2POp> recvs;  // rank r's pieces, in the order it sends them
    for (const auto& piece : pieces) recvs.push_back({P2POp::kRecv, torch::empty(piece.local_shape(), wire), r});
    world.batch_p2p(recvs);
    for (size_t i = 0; i < pieces.size(); ++i) place(pieces[i], recvs[i].tensor);
  }
  NamedTensors out;
  for (const auto& [name, full_shape] : parameter_shapes(config)) {
    TORCH_CHECK(times_covered.at(name).eq(1).all().item<bool>(), "gather: the plans do not cover every element of ",
                name, " exactly once (a piece missing or held twice)");
    out.emplace_back(name, full.at(name));
  }
  return out;
}

}  // namespace picotron
