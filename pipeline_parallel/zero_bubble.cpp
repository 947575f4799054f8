// pipeline_parallel/zero_bubble.cpp — see zero_bubble.h.
#include "pipeline_parallel/zero_bubble.h"

#include "picotron/saved_object.h"

namespace picotron {

void WeightGradQueue::run(int micro, int chunk) {
  torch::NoGradGuard no_grad;
  auto it = pending_.find({micro, chunk});
  TORCH_CHECK(it != pending_.end(), "zero bubble: W", micro, " of chunk ", chunk, " before its B");
  for (auto& work : it->second) work();
  pending_.erase(it);
}

namespace {

// y = x W^T whose backward returns dx now and, while the queue is deferring, dW later.
struct DeferredLinear : torch::autograd::Function<DeferredLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               WeightGradQueue* queue) {
    ctx->save_for_backward({x, w});
    // The Pipeline owns the queue for the whole run, longer than any graph lives.
    ctx->saved_data["queue"] = saved_object(queue);  // picotron/saved_object.h
    return torch::linear(x, w);  // [..., in] -> [..., out]
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor x = saved[0], w = saved[1], dy = grads[0];  // x [..., in], w [out, in], dy [..., out]
    auto* queue = saved_object_of<WeightGradQueue*>(ctx->saved_data["queue"]);
    auto dx = torch::matmul(dy, w);  // [..., in]
    auto weight_grad = [dy, x, w]() {
      return dy.reshape({-1, dy.size(-1)}).t().mm(x.reshape({-1, x.size(-1)}));  // [out, in]
    };
    // Outside a pipeline B (a unit test, or sampling): an ordinary backward.
    if (!queue->deferring()) return {dx, weight_grad(), torch::Tensor()};
    queue->push([weight_grad, w]() mutable {  // what autograd's AccumulateGrad would have done
      auto& g = w.mutable_grad();
      if (g.defined()) g.add_(weight_grad());
      else g = weight_grad();
    });
    // No dW now. Autograd still runs the weight's AccumulateGrad node (and any post-hook
    // on it, e.g. data parallelism's "gradient ready"): such hooks must not launch a
    // reduction under zb-h1. train.cpp syncs after the whole step (prepare_backward(false)
    // for every B), and ZeRO-2/3, whose hooks move gradients, pick dW up after W
    // (SlicedGradients::finish_micro_batch, zero/zero2.cpp).
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

class DeferredLinearModuleImpl : public torch::nn::Module {
 public:
  DeferredLinearModuleImpl(torch::Tensor w, std::shared_ptr<WeightGradQueue> q) : queue(std::move(q)) {
    weight = register_parameter("weight", w);  // the same tensor, under the same name
  }
  torch::Tensor forward(const torch::Tensor& x) { return DeferredLinear::apply(x, weight, queue.get()); }
  torch::Tensor weight;
  std::shared_ptr<WeightGradQueue> queue;
};
TORCH_MODULE(DeferredLinearModule);

}  // namespace

std::shared_ptr<WeightGradQueue> defer_weight_gradients(LlamaForCausalLM& model) {
  auto queue = std::make_shared<WeightGradQueue>();
  auto defer = [&](torch::nn::Module& owner, const std::string& name, torch::nn::AnyModule& slot) {
    // Only a plain linear is split here: another technique's projection (an fp8 linear) would
    // silently lose what it does (check_flag_rules refuses --fp8 with zb-h1 and dualpipev).
    TORCH_CHECK(slot.ptr()->as<LinearImpl>() != nullptr, "zero bubble: ", name,
                " holds a ", slot.ptr()->name(), ", not a plain linear: its dW cannot be deferred");
    auto weight = slot.ptr()->named_parameters(/*recurse=*/false)["weight"];
    replace_slot(owner, name, slot, torch::nn::AnyModule(DeferredLinearModule(weight, queue)));
  };
  for (auto& [index, layer] : model->model->layers->items) {
    auto& attn = *layer->self_attn;
    defer(attn, "q_proj", attn.q_proj);
    defer(attn, "k_proj", attn.k_proj);
    defer(attn, "v_proj", attn.v_proj);
    defer(attn, "o_proj", attn.o_proj);
    if (!layer->mlp) continue;  // a mixture-of-experts layer: its experts' dW stays in B
    auto& mlp = *layer->mlp;
    defer(mlp, "gate_proj", mlp.gate_proj);
    defer(mlp, "up_proj", mlp.up_proj);
    defer(mlp, "down_proj", mlp.down_proj);
  }
  return queue;
}

}  // namespace picotron
