// expert_parallel/expert_parallel.cpp — the experts over N ranks: dispatch, all-to-all,
// local experts, all-to-all back, combine. See expert_parallel.h for the picture.
#include "expert_parallel/expert_parallel.h"

#include "picotron/saved_object.h"

#include <cmath>
#include <stdexcept>

namespace picotron {

// ---- pure ---------------------------------------------------------------------------------
int expert_owner(int64_t expert, int64_t num_experts, int ep) { return int(expert / (num_experts / ep)); }

void keep_local_experts(ShardPlan& plan, const LlamaConfig& c, int ep_index, int ep) {
  const std::string marker = ".block_sparse_moe.experts.";
  for (auto it = plan.begin(); it != plan.end();) {
    const auto at = it->first.find(marker);
    if (at == std::string::npos) { ++it; continue; }
    const int64_t expert = std::stoll(it->first.substr(at + marker.size()));
    if (expert_owner(expert, c.num_local_experts, ep) != ep_index) { it = plan.erase(it); continue; }
    it->second.dp_stride = ep;  // its copies: the dp ranks with the same dp % ep
    ++it;
  }
}

Dispatch dispatch_order(const torch::Tensor& experts, int64_t num_experts, int ep) {
  const auto flat = experts.reshape({-1}).to(torch::kCPU);              // [T·k] expert of each pair
  // Owner ranks are consecutive runs of experts, so sorting by expert sorts by rank.
  const auto order = std::get<1>(flat.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));  // [T·k]
  const auto per_expert = torch::bincount(flat, /*weights=*/{}, num_experts);  // [E]
  Dispatch d{order.to(experts.device()), std::vector<int64_t>(size_t(ep), 0)};
  const auto counts = per_expert.accessor<int64_t, 1>();
  for (int64_t e = 0; e < num_experts; ++e) d.send_rows[size_t(expert_owner(e, num_experts, ep))] += counts[e];
  return d;
}

torch::Tensor inverse_order(const torch::Tensor& order) {
  auto inverse = torch::empty_like(order);
  inverse.index_put_({order}, torch::arange(order.numel(), order.options()));  // inverse[order[i]] = i
  return inverse;
}

// ---- the all-to-all as an autograd op -------------------------------------------------------
namespace {
class AllToAllRows : public torch::autograd::Function<AllToAllRows> {
 public:
  // fwd: rows to their ranks   bwd: the gradient rows back to where the rows came from
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               std::vector<int64_t> send_rows, std::vector<int64_t> recv_rows, Comm* group) {
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    ctx->saved_data["group"] = saved_object(group);
    return move(x.contiguous(), send_rows, recv_rows, *group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    Comm& group = *saved_object_of<Comm*>(ctx->saved_data["group"]);
    const auto send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    return {move(grads[0].contiguous(), recv, send, group), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
  static torch::Tensor move(const torch::Tensor& x, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                            Comm& group) {
    int64_t rows = 0;
    for (int64_t r : recv) rows += r;
    auto shape = x.sizes().vec();
    shape[0] = rows;
    auto out = torch::empty(shape, x.options());  // [sum recv, ...]
    group.all_to_all(out, x, send, recv, carries("expert parallelism: token rows to the ranks of their experts, or "
                                                 "the experts' outputs back"));
    return out;
  }
};
}  // namespace

torch::Tensor all_to_all_rows(const torch::Tensor& x, const std::vector<int64_t>& send_rows,
                              const std::vector<int64_t>& recv_rows, Comm& group) {
  return AllToAllRows::apply(x, send_rows, recv_rows, &group);
}

// ---- the layer -----------------------------------------------------------------------------
ExpertParallel::ExpertParallel(LlamaForCausalLM& model, Comm& cp_dp, int ep, int cp) : ep_(ep) {
  // cp×dp rank d = dp_i·cp + cp_i (mesh.h). The ep group: N consecutive dp ranks of one cp
  // rank (ep rank dp_i % N, which picks the experts: shard_plan_for); the expert replicas: every
  // cp×dp rank with the same dp_i % N.
  const int d = cp_dp.rank(), dp_i = d / cp, cp_i = d % cp;
  ep_group_ = cp_dp.split(/*color=*/(dp_i / ep) * cp + cp_i, /*key=*/dp_i % ep, "ep");
  replicas_ = cp_dp.split(/*color=*/dp_i % ep, /*key=*/d, "ep_replicas");
  for (auto& [index, layer] : model->model->layers->items)
    if (MoEImpl* moe = moe_of(*layer))
      moe->runner = [this, moe](const torch::Tensor& x, const Routing& r) { return run(*moe, x, r); };
}

torch::Tensor ExpertParallel::run(MoEImpl& moe, const torch::Tensor& x, const Routing& r) {
  const int64_t k = r.experts.size(1);
  // 1. The (token, slot) pairs in the order they leave: by owner rank, then expert.
  // BEGIN ASSIGNMENT ep.dispatch_combine
  const Dispatch d = dispatch_order(r.experts, moe.num_experts, ep_);
  const auto token = d.order.div(k, "floor");                                    // [T·k] each pair's token
  const auto send_x = x.index_select(0, token);                                  // [T·k, H]
  const auto send_e = r.experts.reshape({-1}).index_select(0, d.order).contiguous();  // [T·k] their experts
  // 2. How many rows each rank gets from each, then the rows and their experts.
  auto counts_in = torch::tensor(d.send_rows, torch::kInt64).to(x.device());    // [N]
  auto counts_out = torch::empty_like(counts_in);
  const std::vector<int64_t> ones(size_t(ep_), 1);
  ep_group_.all_to_all(counts_out, counts_in, ones, ones, carries("expert parallelism: how many rows each rank sends each"));
  const auto recv_counts = counts_out.to(torch::kCPU);
  const std::vector<int64_t> recv_rows(recv_counts.data_ptr<int64_t>(), recv_counts.data_ptr<int64_t>() + ep_);
  const auto recv_x = all_to_all_rows(send_x, d.send_rows, recv_rows, ep_group_);  // [R, H] R = sum recv_rows
  auto recv_e = torch::empty({recv_x.size(0)}, send_e.options());                  // [R]
  ep_group_.all_to_all(recv_e, send_e, d.send_rows, recv_rows, carries("expert parallelism: each row's expert"));
  // 3. My experts on the rows they got. y starts as recv_x · 0, not as zeros: then the
  // graph reaches both all-to-alls even on a rank whose experts got no row, and every rank
  // runs both backward all-to-alls (a collective that one rank skips hangs the others).
  auto y = recv_x * 0.0;  // [R, H]
  for (auto& [e, expert] : moe.experts) {
    const auto rows = (recv_e == e).nonzero().select(1, 0);  // [n]
    if (rows.numel() > 0) y = y.index_add(0, rows, expert->forward(recv_x.index_select(0, rows)));
  }
  // 4. Every result home, in the order it left; 5. weighted into its token's row.
  const auto back = all_to_all_rows(y, recv_rows, d.send_rows, ep_group_);          // [T·k, H]
  const auto w = r.weights.reshape({-1}).index_select(0, d.order).unsqueeze(-1);     // [T·k, 1]
  return torch::zeros_like(x).index_add(0, token, back * w);                        // [T, H]
  // END ASSIGNMENT
}

std::unique_ptr<Optimizer> ExpertParallel::optimizer(const NamedTensors& named, const ShardPlan& plan, Comm& cp_dp,
                                                     const MakeOptimizer& make) {
  NamedTensors dense, experts;
  for (const auto& item : named) (plan.at(item.first).dp_stride > 1 ? experts : dense).push_back(item);
  return std::make_unique<DenseAndExperts>(make(cp_dp, dense, 1), make(replicas_, experts, ep_), ep_);
}

// ---- the dense parameters and the experts, each over its own group ------------------------
namespace {
// The two parts' views as one: pieces and names from both, counters from the dense part.
class BothStates : public OptimizerState {
 public:
  BothStates(OptimizerState& dense, OptimizerState& experts) : dense_(dense), experts_(experts) {}
  int64_t steps_taken() const override { return dense_.steps_taken(); }
  void set_steps_taken(int64_t t) override { dense_.set_steps_taken(t), experts_.set_steps_taken(t); }
  std::vector<StatePiece> owned_state(const MeshCoords& here) override {
    auto out = dense_.owned_state(here);
    for (auto& piece : experts_.owned_state(here)) out.push_back(std::move(piece));
    return out;
  }
  void load_state(const StateReader& read) override { dense_.load_state(read), experts_.load_state(read); }
  std::map<std::string, torch::Tensor> masters_by_name() override {
    auto out = dense_.masters_by_name();
    out.merge(experts_.masters_by_name());
    return out;
  }
  std::map<std::string, torch::Tensor> weights_by_name() override {
    auto out = dense_.weights_by_name();
    out.merge(experts_.weights_by_name());
    return out;
  }
  torch::ScalarType state_dtype() const override { return dense_.state_dtype(); }
  std::string summary() const override {
    if (dense_.summary().empty() && experts_.summary().empty()) return "";  // --zero 0: plain AdamW says nothing
    return "dense parameters: " + dense_.summary() + "\nexperts (ep_replicas: the ranks holding the same experts): " +
           experts_.summary();
  }

 private:
  OptimizerState &dense_, &experts_;
};
}  // namespace

DenseAndExperts::DenseAndExperts(std::unique_ptr<Optimizer> dense, std::unique_ptr<Optimizer> experts, int ep)
    : dense_(std::move(dense)), experts_(std::move(experts)), ep_(ep) {
  // The sums registered with this optimizer (over tp under SP, a pipeline's tied
  // embedding) run inside each part's sync, where it holds whole gradients (ZeRO-1) or
  // its pieces (ZeRO-2/3), on that part's parameters.
  dense_->add_grad_sum([this](std::vector<TrainableParam>& held) { run_grad_sums(held); });
  experts_->add_grad_sum([this](std::vector<TrainableParam>& held) {
    run_grad_sums(held);
    torch::NoGradGuard no_grad;
    for (auto& p : held) p.main_grad.div_(double(ep_));  // the ep group's sum -> its average
  });
  if (dense_->state() && experts_->state()) state_ = std::make_unique<BothStates>(*dense_->state(), *experts_->state());
}

void DenseAndExperts::zero_main_grads() { dense_->zero_main_grads(), experts_->zero_main_grads(); }
void DenseAndExperts::prepare_backward(bool last) { dense_->prepare_backward(last), experts_->prepare_backward(last); }
void DenseAndExperts::accumulate_grads() { dense_->accumulate_grads(), experts_->accumulate_grads(); }
void DenseAndExperts::sync_grads() { dense_->sync_grads(), experts_->sync_grads(); }

double DenseAndExperts::grad_norm(Comm& world, const MeshCoords& here) {
  return std::hypot(dense_->grad_norm(world, here), experts_->grad_norm(world, here));  // sqrt(|d|^2 + |e|^2)
}

void DenseAndExperts::step(double lr, double grad_scale) { dense_->step(lr, grad_scale), experts_->step(lr, grad_scale); }

std::vector<double> global_tokens_per_expert(LlamaForCausalLMImpl& model, Mesh& mesh, bool sp, int loss_pp_rank) {
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(mesh.world().device());
  RouterLog* log = router_log_of(model);
  auto counts = log && log->routed_tokens.defined()  // [E], this rank's micro-batches (pp: the loss's stage)
                    ? log->routed_tokens.to(torch::kFloat64).contiguous()
                    : torch::zeros({model.config.num_local_experts}, f64);
  mesh.cp_dp().all_reduce(counts, ReduceOp::kSum, carries("the step line: tokens per expert, summed"));
  if (sp) mesh.tp().all_reduce(counts, ReduceOp::kSum, carries("the step line: tokens per expert, summed"));
  if (mesh.shape().pp > 1) mesh.pp().broadcast(counts, loss_pp_rank, carries("the step line: tokens per expert"));
  counts = counts.cpu();
  if (log) log->routed_tokens = torch::Tensor();
  return {counts.data_ptr<double>(), counts.data_ptr<double>() + counts.numel()};
}

}  // namespace picotron
