// picotron/init.cpp — see init.h.
#include "picotron/init.h"

#include <ATen/CPUGeneratorImpl.h>

namespace picotron {

uint64_t parameter_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a offset basis
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  uint64_t z = h ^ (seed + 0x9e3779b97f4a7c15ull);  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::Tensor initial_value(const std::string& name, torch::IntArrayRef full_shape, uint64_t seed, double init_std) {
  if (ends_with(name, "norm.weight")) return torch::ones(full_shape);  // RMSNorm gains start at 1
  auto gen = at::detail::createCPUGenerator(parameter_seed(seed, name));
  return torch::normal(/*mean=*/0.0, /*std=*/init_std, full_shape, gen);  // fp32, CPU
}

torch::Tensor local_slice(const torch::Tensor& full, const ShardRecord& r) {
  if (!r.is_split()) return full;
  const Slice s = r.slice();
  return full.narrow(r.split_dim, s.offset, s.length);  // a view: no copy yet
}

void init_parameters(torch::nn::Module& module, const ShardPlan& plan, uint64_t seed, double init_std) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    const auto it = plan.find(item.key());
    TORCH_CHECK(it != plan.end(), "init: parameter ", item.key(), " has no shard record");
    const ShardRecord& r = it->second;
    auto& p = item.value();
    TORCH_CHECK(p.sizes() == torch::IntArrayRef(r.local_shape()), "init: ", item.key(), " is ", p.sizes(),
                " but its record says ", torch::IntArrayRef(r.local_shape()));
    const auto full = initial_value(item.key(), r.full_shape, seed, init_std);  // one full parameter at a time
    p.copy_(local_slice(full, r));                                             // [local_shape]
  }
}

void init_parameters(torch::nn::Module& module, uint64_t seed, double init_std) {
  ShardPlan whole;
  for (auto& item : module.named_parameters()) {
    ShardRecord r;
    r.name = item.key();
    r.full_shape = item.value().sizes().vec();
    whole[r.name] = r;
  }
  init_parameters(module, whole, seed, init_std);
}

}  // namespace picotron
