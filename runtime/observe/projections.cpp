// runtime/observe/projections.cpp — see projections.h.
#include "runtime/observe/projections.h"

#include <stdexcept>

#include "runtime/output/print0.h"

#include <sstream>

namespace picotron {

namespace {
// A slot's module in words: its C++ type, as LibTorch names it (Module::name()).
std::string module_words(torch::nn::Module& m) {
  const std::string type = m.name();
  if (type.find("fp8::Linear") != std::string::npos) return "fp8 linear";
  if (type.find("DeferredLinear") != std::string::npos) return "linear, dW deferred to W (zero bubble)";
  if (m.as<LinearImpl>()) return "linear";
  return type;
}

std::string split_words(const ShardPlan& plan, const std::string& weight) {
  const auto it = plan.find(weight);
  if (it == plan.end() || !it->second.is_split()) return "whole";
  const ShardRecord& r = it->second;
  const std::string over = std::string(" over ") + axis_name(r.split_axis) + " (" + std::to_string(r.count) + " slices)";
  return (r.split_dim == 0 ? "column-parallel" : "row-parallel") + over;  // W [out, in]: dim 0 splits the outputs
}
}  // namespace

std::vector<ProjectionKind> projection_kinds(LlamaForCausalLMImpl& model, const ShardPlan& plan) {
  std::vector<ProjectionKind> out;
  for (auto& [index, layer] : model.model->layers->items) {
    const std::string prefix = "model.layers." + std::to_string(index) + ".";
    auto add = [&](const std::string& block, const std::string& name, torch::nn::AnyModule& slot) {
      out.push_back({index, name, module_words(*slot.ptr()), split_words(plan, prefix + block + name + ".weight")});
    };
    auto& attn = *layer->self_attn;
    add("self_attn.", "q_proj", attn.q_proj);
    add("self_attn.", "k_proj", attn.k_proj);
    add("self_attn.", "v_proj", attn.v_proj);
    add("self_attn.", "o_proj", attn.o_proj);
    if (!layer->mlp) continue;  // a mixture of experts' layer
    auto& mlp = *layer->mlp;
    add("mlp.", "gate_proj", mlp.gate_proj);
    add("mlp.", "up_proj", mlp.up_proj);
    add("mlp.", "down_proj", mlp.down_proj);
  }
  return out;
}

std::string projections_problem(const std::vector<ProjectionKind>& kinds, bool fp8) {
  for (const auto& k : kinds)
    if ((k.module == "fp8 linear") != fp8)
      return "layer " + std::to_string(k.layer) + " " + k.slot + " is a " + k.module +
             (fp8 ? ", though --fp8 asks for an fp8 linear" : ", though --fp8 was not given") +
             " (a technique replaced the slot after another: runtime/observe/projections.h)";
  return "";
}

std::string projections_text(const std::vector<ProjectionKind>& kinds) {
  if (kinds.empty()) return "projections: none on this rank (no dense layer)";
  std::ostringstream o;
  o << "projections of layer " << kinds.front().layer << " (this rank's first; read from the model's slots):";
  for (const auto& k : kinds)
    if (k.layer == kinds.front().layer) o << "\n  " << k.slot << ": " << k.module << ", " << k.split;
  return o.str();
}

void check_projections(LlamaForCausalLMImpl& model, const ShardPlan& plan, bool fp8, bool explain, int rank) {
  const std::vector<ProjectionKind> kinds = projection_kinds(model, plan);
  if (const std::string p = projections_problem(kinds, fp8); !p.empty()) throw std::runtime_error(p);
  if (explain) print0(rank, projections_text(kinds));
}

}  // namespace picotron
