// expert_parallel/moe.cpp — router, top-k, the experts and the load-balancing loss. See moe.h.
#include "expert_parallel/moe.h"

#include "picotron/saved_object.h"
#include "picotron/dtype.h"

#include <stdexcept>

namespace picotron {

namespace F = torch::nn::functional;

static const ShardRecord& record_in(const ShardPlan& plan, const std::string& name) {
  const auto it = plan.find(name);
  TORCH_CHECK(it != plan.end(), "shard plan: no record for ", name);
  return it->second;
}

// ---- the load-balancing loss ---------------------------------------------------------
torch::Tensor RouterLog::counts() const {
  torch::Tensor sum;
  for (const auto& [index, l] : layers) sum = sum.defined() ? sum + l.counts : l.counts;
  return sum;  // [E]
}

torch::Tensor RouterLog::stats() const {
  if (layers.empty()) return {};
  torch::Tensor probs;  // [E]: sum over every layer's rows of p
  int64_t rows = 0;     // R = L x T
  for (const auto& [index, l] : layers) {
    probs = probs.defined() ? probs + l.probs : l.probs;
    rows += l.rows;
  }
  return torch::cat({counts().to(probs.scalar_type()), probs,
                     torch::full({1}, double(rows), probs.options().requires_grad(false))});  // [2E + 1]
}

torch::Tensor RouterLog::aux_loss(int64_t num_experts, double coef) const {
  if (layers.empty()) return {};
  auto stats = carried.defined() ? carried + this->stats() : this->stats();  // [2E + 1]
  if (sum_over_ranks) stats = sum_over_ranks(stats);  // cp / sp: the whole sequences' statistics
  // BEGIN ASSIGNMENT moe.balancing_loss
  const auto f = stats.narrow(0, 0, num_experts).detach() / stats[2 * num_experts].detach();  // [E] share of the pairs
  const auto P = stats.narrow(0, num_experts, num_experts) / stats[2 * num_experts].detach();  // [E] mean probability
  return coef * double(num_experts) * (f * P).sum();                // E · sum_e f_e P_e, weighted
  // END ASSIGNMENT
}

void RouterLog::start() {
  layers.clear();
  carried = torch::Tensor();
}

std::vector<torch::Tensor> RouterLog::take() {
  // [2E + 1]: the earlier stages' plus mine (zeros when no router logged: no gradient path)
  auto mine = layers.empty() ? torch::zeros({2 * num_experts + 1}, stats_opts) : stats();
  layers.clear();
  return {carried.defined() ? carried + mine : mine};
}

torch::Tensor RouterLog::loss_term() {
  if (layers.empty()) return {};
  auto counts = this->counts();  // [E]
  if (carried.defined())         // a pipeline's earlier stages
    counts = counts + carried.narrow(0, 0, counts.size(0)).detach().to(counts.scalar_type());
  routed_tokens = routed_tokens.defined() ? routed_tokens + counts : counts;
  return coef > 0 ? aux_loss(num_experts, coef) : torch::Tensor();
}

torch::Tensor RouterLog::recorded(int64_t layer) {
  const auto it = layers.find(layer);
  return it == layers.end() ? torch::Tensor() : it->second.probs;  // [E], with the router's gradient path
}

namespace {
// fwd: all-reduce(sum) over the group   bwd: all-reduce(sum) of the gradient, or (sum_gradient
// false) the gradient as it is.
class SumOverGroup : public torch::autograd::Function<SumOverGroup> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, Comm* group,
                               bool sum_gradient) {
    ctx->saved_data["group"] = saved_object(group);
    ctx->saved_data["sum_gradient"] = sum_gradient;
    auto y = x.clone();
    group->all_reduce(y, ReduceOp::kSum, carries("the router's statistics (tokens and probability per expert), summed over the ranks holding parts of the sequence"));
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto g = grads[0].contiguous().clone();
    // BEGIN ASSIGNMENT moe.balancing_loss
    if (ctx->saved_data["sum_gradient"].toBool())
      saved_object_of<Comm*>(ctx->saved_data["group"])->all_reduce(g, ReduceOp::kSum, carries("the router statistics' gradient, summed"));
    // END ASSIGNMENT
    return {g, torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

void sum_routing_over(LlamaForCausalLMImpl& model, Comm* cp, Comm* tp_sp) {
  if (RouterLog* log = router_log_of(model); log && (cp || tp_sp)) log->sum_over_ranks = router_stats_sum(cp, tp_sp);
}

std::function<torch::Tensor(const torch::Tensor&)> router_stats_sum(Comm* cp, Comm* tp_sp) {
  return [cp, tp_sp](const torch::Tensor& stats) {
    auto s = stats;
    if (tp_sp) s = SumOverGroup::apply(s, tp_sp, /*sum_gradient=*/false);
    if (cp) s = SumOverGroup::apply(s, cp, /*sum_gradient=*/true);
    return s;
  };
}

// ---- routing ---------------------------------------------------------------------------
Routing route(const torch::Tensor& probs, int64_t k, torch::ScalarType weight_dtype) {
  auto [top, experts] = probs.topk(k, /*dim=*/-1);   // [T, k] each, largest first
  top = top / top.sum(/*dim=*/-1, /*keepdim=*/true);  // Mixtral: the k weights sum to 1
  return {experts, top.to(weight_dtype)};
}

// ---- the block ------------------------------------------------------------------------
// A module "name" holding one parameter "weight" (the names Hugging Face gives them).
static torch::Tensor weight_module(torch::nn::Module& owner, const std::string& name, torch::Tensor w) {
  auto holder = owner.register_module(name, std::make_shared<torch::nn::Module>());
  return holder->register_parameter("weight", std::move(w));
}

ExpertImpl::ExpertImpl(int64_t hidden, int64_t intermediate, torch::TensorOptions opts) {
  w1 = weight_module(*this, "w1", torch::empty({intermediate, hidden}, opts));  // gate [I, H]
  w2 = weight_module(*this, "w2", torch::empty({hidden, intermediate}, opts));  // down [H, I]
  w3 = weight_module(*this, "w3", torch::empty({intermediate, hidden}, opts));  // up   [I, H]
}

torch::Tensor ExpertImpl::forward(const torch::Tensor& x) {
  return torch::linear(F::silu(torch::linear(x, w1)) * torch::linear(x, w3), w2);  // [n, I] ... -> [n, H]
}

MoEImpl::MoEImpl(const LlamaConfig& c, const ShardPlan& plan, const std::string& prefix, int64_t index,
                 torch::TensorOptions opts)
    : num_experts(c.num_local_experts), top_k(c.num_experts_per_tok), layer_index(index) {
  const auto router = record_in(plan, prefix + "gate.weight").local_shape();  // [E, H]
  gate = weight_module(*this, "gate", torch::empty(router, opts));
  auto list = register_module("experts", std::make_shared<torch::nn::Module>());
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::string name = prefix + "experts." + std::to_string(e) + ".w1.weight";
    if (!plan.count(name)) continue;  // another rank's expert (expert parallelism)
    experts.emplace(e, list->register_module(std::to_string(e), Expert(c.hidden_size, c.intermediate_size, opts)));
  }
}

torch::Tensor MoEImpl::run_experts(const torch::Tensor& x, const Routing& r) {
  auto out = torch::zeros_like(x);  // [T, H]
  for (auto& [e, expert] : experts) {
    const auto hit = (r.experts == e).nonzero();  // [n, 2]: (token, slot) pairs routed to e
    if (hit.size(0) == 0) continue;
    const auto token = hit.select(1, 0), slot = hit.select(1, 1);  // [n] each
    const auto w = r.weights.index({token, slot}).unsqueeze(-1);    // [n, 1]
    out = out.index_add(0, token, expert->forward(x.index_select(0, token)) * w);  // [n, H] into their rows
  }
  return out;
}

torch::Tensor MoEImpl::forward(const torch::Tensor& x_in) {
  const auto shape = x_in.sizes().vec();
  const auto x = x_in.reshape({-1, shape.back()});                           // [T, H]
  const auto logits = torch::linear(x, gate);                                // [T, E]
  const auto probs = logits.to(accumulate_type(logits.scalar_type())).softmax(-1);  // [T, E] fp32 (fp64)
  const Routing r = route(probs, top_k, x.scalar_type());                    // [T, k] experts, weights
  if (log) {  // the loss adds the balancing term (when training: head_loss)
    auto counts = torch::zeros({num_experts}, probs.options().dtype(torch::kFloat64));
    counts.index_add_(0, r.experts.reshape({-1}).to(counts.device()),
                      torch::ones({r.experts.numel()}, counts.options()));   // [E]
    log->layers[layer_index] = {counts, probs.sum(0), x.size(0)};
  }
  const auto y = runner ? runner(x, r) : run_experts(x, r);                  // [T, H]
  return y.reshape(shape);                                                   // [B, S, H]
}

// ---- in the model ---------------------------------------------------------------------
std::shared_ptr<RouterLog> add_experts(LlamaForCausalLMImpl& model, const ShardPlan& plan, torch::TensorOptions opts) {
  const LlamaConfig& c = model.config;
  if (!c.is_moe()) return nullptr;
  const auto stats_opts = opts.dtype(accumulate_type(opts.dtype().toScalarType()));  // fp32 (fp64): counts stay exact
  auto log = std::make_shared<RouterLog>(c.num_local_experts, c.router_aux_loss_coef, stats_opts);
  for (auto& [index, layer] : model.model->layers->items) {
    const std::string prefix = "model.layers." + std::to_string(index) + ".block_sparse_moe.";
    MoE moe(c, plan, prefix, index, opts);
    moe->log = log;
    layer->feed_forward = torch::nn::AnyModule(moe);
    layer->register_module("block_sparse_moe", moe);
  }
  model.layer_stats = log;
  model.check_holds(plan);  // now every parameter of the plan, the experts' too
  return log;
}

MoEImpl* moe_of(DecoderLayerImpl& layer) {
  return layer.feed_forward.is_empty() ? nullptr : dynamic_cast<MoEImpl*>(layer.feed_forward.ptr().get());
}

RouterLog* router_log_of(LlamaForCausalLMImpl& model) { return dynamic_cast<RouterLog*>(model.layer_stats.get()); }

}  // namespace picotron
