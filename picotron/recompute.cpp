// picotron/recompute.cpp — see recompute.h for the three modes.
#include "picotron/recompute.h"

#include "picotron/saved_object.h"

#include <memory>
#include <stdexcept>

namespace picotron {

using torch::autograd::AutogradContext;
using Fn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

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
// backward: fn(inputs) again with autograd on, then backpropagate through its outputs: the
// inputs' gradients are returned, the parameters inside fn get theirs on the way.
struct Checkpoint : torch::autograd::Function<Checkpoint> {
  static torch::autograd::variable_list forward(AutogradContext* ctx, at::TensorList inputs, Fn fn) {
    // BEGIN ASSIGNMENT memory.recompute_layer
    std::vector<torch::Tensor> outs;
    {
      torch::NoGradGuard no_graph;  // nothing inside fn is kept for backward
      outs = fn(inputs.vec());
    }
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["fn"] = saved_object(std::move(fn));  // freed with the graph (picotron/saved_object.h)
    return outs;
    // END ASSIGNMENT
  }

  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grads) {
    // BEGIN ASSIGNMENT memory.recompute_layer
    const Fn& fn = saved_object_of<Fn>(ctx->saved_data["fn"]);
    std::vector<torch::Tensor> leaves;
    for (const auto& saved : ctx->get_saved_variables())
      leaves.push_back(saved.detach().requires_grad_(saved.requires_grad()));  // a fresh leaf per input
    std::vector<torch::Tensor> outs;
    {
      torch::AutoGradMode graph_on(true);
      outs = fn(leaves);  // the forward again, this time recording a graph
    }
    std::vector<torch::Tensor> from, grad;  // the outputs a gradient can flow back through
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].requires_grad()) from.push_back(outs[i]), grad.push_back(grads[i]);
    torch::autograd::backward(from, grad);
    torch::autograd::variable_list result;
    for (const auto& leaf : leaves) result.push_back(leaf.grad());  // undefined where none flowed
    result.push_back(torch::Tensor());  // fn
    return result;
    // END ASSIGNMENT
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint_all(Fn fn, const std::vector<torch::Tensor>& inputs) {
  if (!torch::GradMode::is_enabled()) return fn(inputs);  // no backward will come: nothing to save
  return Checkpoint::apply(at::TensorList(inputs), std::move(fn));
}

torch::Tensor checkpoint(std::function<torch::Tensor(const std::vector<torch::Tensor>&)> fn,
                         const std::vector<torch::Tensor>& inputs) {
  return checkpoint_all([fn = std::move(fn)](const std::vector<torch::Tensor>& in) { return std::vector{fn(in)}; },
                        inputs)[0];
}

void apply_recompute(LlamaForCausalLM& model, Recompute mode) {
  if (mode == Recompute::kFull) {
    // Each layer keeps its input only; backward runs it again (through the wrappers
    // inside this one: the re-run is the same forward).
    // (a mixture of experts: its routers' log; recompute.h)
    std::shared_ptr<RecomputedRecords> stats = std::dynamic_pointer_cast<RecomputedRecords>(model->layer_stats);
    model->wrap_layers({"recompute", [stats](const LayerCall& call, const torch::Tensor& x) {
                          const auto next = call.next;  // kept by the graph until backward
                          if (!stats)
                            return checkpoint([next](const std::vector<torch::Tensor>& in) { return next(in[0]); }, {x});
                          // A layer that records statistics for the loss (RecomputedRecords; a
                          // mixture of experts' routing probabilities): its first run (no graph)
                          // records them without a gradient path, so they leave the checkpoint as
                          // a second output; the loss term's gradient then reaches the router
                          // through the re-run (expert_parallel/moe.h).
                          const int64_t index = call.index;
                          const auto outs = checkpoint_all(
                              [next, stats, index](const std::vector<torch::Tensor>& in) {
                                auto y = next(in[0]);                      // [B, S, H]
                                const auto recorded = stats->recorded(index);  // [E]
                                return recorded.defined() ? std::vector{y, recorded} : std::vector{y};
                              },
                              {x});
                          if (outs.size() > 1) stats->rerecord(index, outs[1]);  // (now on the graph)
                          return outs[0];
                        }});
  } else if (mode == Recompute::kSelective) {
    for (auto& [index, layer] : model->model->layers->items) {
      AttentionCore inner = layer->self_attn->core;  // the scores and softmax: S^2 per head
      layer->self_attn->core = [inner](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return checkpoint([inner](const std::vector<torch::Tensor>& in) { return inner(in[0], in[1], in[2]); },
                          {q, k, v});
      };
      for (RMSNorm& n : {std::ref(layer->input_layernorm), std::ref(layer->post_attention_layernorm)}) {
        NormFn norm = n->norm;  // fp32 copies of x (the fused kernel: 1/rms)
        n->norm = [norm](const torch::Tensor& x, const torch::Tensor& w, double eps) {
          return checkpoint([norm, w, eps](const std::vector<torch::Tensor>& in) { return norm(in[0], w, eps); }, {x});
        };
      }
      if (layer->mlp) {  // silu(gate) and the product: 2 x [B, S, I] (the fused kernel keeps no silu)
        ActivationFn activation = layer->mlp->activation;
        layer->mlp->activation = [activation](const torch::Tensor& gate, const torch::Tensor& up) {
          return checkpoint([activation](const std::vector<torch::Tensor>& in) { return activation(in[0], in[1]); },
                            {gate, up});
        };
      }
    }
  }
}

}  // namespace picotron
