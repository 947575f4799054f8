// picotron/recompute.cpp — see recompute.h for the three modes.
#include "picotron/recompute.h"

#include "picotron/saved_object.h"

#include <memory>
#include <stdexcept>

namespace picotron {

using torch::autograd::AutogradContext;
using Fn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  throw std::invalid_argument("--recompute must be none, selective or full, got '" + name + "'");
}

const char* recompute_name(Recompute r) {
  return r == Recompute::kFull ? "full" : r == Recompute::kSelective ? "selective" : "none";
}

namespace {

// forward: fn(inputs) with no graph recorded; only the inputs are saved.
// backward: fn(inputs) again with autograd on, then backpropagate through it: the
// inputs' gradients are returned, the parameters inside fn get theirs on the way.
struct Checkpoint : torch::autograd::Function<Checkpoint> {
  static torch::Tensor forward(AutogradContext* ctx, at::TensorList inputs, Fn fn) {
    // BEGIN ASSIGNMENT memory.recompute_layer
    torch::Tensor out;
    {
      torch::NoGradGuard no_graph;  // nothing inside fn is kept for backward
      out = fn(inputs.vec());
    }
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["fn"] = saved_object(std::move(fn));  // freed with the graph (picotron/saved_object.h)
    return out;
    // END ASSIGNMENT
  }

  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grads) {
    // BEGIN ASSIGNMENT memory.recompute_layer
    const Fn& fn = saved_object_of<Fn>(ctx->saved_data["fn"]);
    std::vector<torch::Tensor> leaves;
    for (const auto& saved : ctx->get_saved_variables())
      leaves.push_back(saved.detach().requires_grad_(saved.requires_grad()));  // a fresh leaf per input
    torch::Tensor out;
    {
      torch::AutoGradMode graph_on(true);
      out = fn(leaves);  // the forward again, this time recording a graph
    }
    torch::autograd::backward({out}, {grads[0]});
    torch::autograd::variable_list result;
    for (const auto& leaf : leaves) result.push_back(leaf.grad());  // undefined where none flowed
    result.push_back(torch::Tensor());  // fn
    return result;
    // END ASSIGNMENT
  }
};

}  // namespace

torch::Tensor checkpoint(Fn fn, const std::vector<torch::Tensor>& inputs) {
  if (!torch::GradMode::is_enabled()) return fn(inputs);  // no backward will come: nothing to save
  return Checkpoint::apply(at::TensorList(inputs), std::move(fn));
}

void apply_recompute(LlamaForCausalLM& model, Recompute mode) {
  if (mode == Recompute::kFull) {
    // Each layer keeps its input only; backward runs it again (through the wrappers
    // inside this one: the re-run is the same forward).
    model->wrap_layers({"recompute", [](const LayerCall& call, const torch::Tensor& x) {
                          const auto next = call.next;  // kept by the graph until backward
                          return checkpoint([next](const std::vector<torch::Tensor>& in) { return next(in[0]); }, {x});
                        }});
  } else if (mode == Recompute::kSelective) {
    for (auto& [index, layer] : model->model->layers->items) {
      AttentionCore inner = layer->self_attn->core;  // the scores and softmax: S^2 per head
      layer->self_attn->core = [inner](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return checkpoint([inner](const std::vector<torch::Tensor>& in) { return inner(in[0], in[1], in[2]); },
                          {q, k, v});
      };
      layer->input_layernorm->recompute = true;           // fp32 copies of x
      layer->post_attention_layernorm->recompute = true;
      if (layer->mlp) layer->mlp->recompute_activation = true;  // silu(gate) and the product: 2 x [B, S, I]
    }
  }
}

}  // namespace picotron
