// picotron/optim.cpp — see optim.h for the math.
#include "picotron/optim.h"
#include "picotron/dtype.h"
#include "picotron/optim_state.h"

#include <cmath>


namespace picotron {

AdamW::AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params, AdamWOptions opts,
             const ShardPlan& plan)
    : opts_(opts) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : named_params) {
    TrainableParam tp;
    tp.name = name;
    tp.param = p;
    // Optimizer math in fp32 — or fp64 when the whole run is fp64 (the equivalence tests).
    const auto state_dtype = accumulate_type(p.scalar_type());
    tp.master = p.scalar_type() == state_dtype ? p : p.detach().to(state_dtype).clone();
    tp.main_grad = torch::zeros_like(tp.master);
    tp.exp_avg = torch::zeros_like(tp.master);
    tp.exp_avg_sq = torch::zeros_like(tp.master);
    tp.decay = p.dim() >= 2;
    if (plan.empty()) {  // a whole parameter that only this process holds
      tp.record.name = name;
      tp.record.full_shape = p.sizes().vec();
    } else {
      const auto it = plan.find(name);
      TORCH_CHECK(it != plan.end(), "optimizer: parameter ", name, " has no shard record");
      tp.record = it->second;
    }
    params_.push_back(std::move(tp));
  }
  state_ = adamw_state(*this);
  zero_main_grads();
}

AdamW::AdamW(std::vector<TrainableParam> laid_out, AdamWOptions opts, LaidOut)
    : params_(std::move(laid_out)), opts_(std::move(opts)), state_(adamw_state(*this)) {}

std::unique_ptr<AdamW> AdamW::over(std::vector<TrainableParam> laid_out, AdamWOptions opts) {
  return std::unique_ptr<AdamW>(new AdamW(std::move(laid_out), std::move(opts), LaidOut{}));
}

AdamW::~AdamW() = default;

void AdamW::accumulate_grads() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    auto& g = p.param.mutable_grad();
    if (!g.defined() || g.is_same(p.main_grad)) continue;  // taken by a hook, unused, or already main_grad
    // An fp32/fp64 grad that is not main_grad was replaced behind our back: added, it
    // would count main_grad twice (create_graph accumulates out of place).
    TORCH_CHECK(!p.aliases_grad(), "optimizer: ", p.name, ".grad is no longer its main grad (zero_grad()? ",
                "create_graph?); call zero_main_grads() before the step's first backward");
    p.main_grad.add_(g);                                    // bf16 -> fp32 happens in the add
    g = torch::Tensor();                                    // free it: the next micro-batch writes a fresh one
  }
}

void AdamW::zero_main_grads() {
  for (auto& p : params_) {
    p.main_grad.zero_();
    // Same dtype: let autograd accumulate into main_grad itself (in place, no copy). Set
    // every step: a data-parallel bucket may have replaced main_grad by a view.
    if (p.aliases_grad()) p.param.mutable_grad() = p.main_grad;
  }
}

void AdamW::step(double lr, double grad_scale) {
  const double c = grad_scale;  // the update uses c * main_grad
  torch::NoGradGuard no_grad;
  ++t_;
  const double b1 = opts_.beta1, b2 = opts_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(t_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(t_)));
  if (opts_.fused_step) {  // the same update, every tensor in one launch (kernels/adamw.cu)
    opts_.fused_step(params_, {lr, b1, b2, opts_.eps, opts_.weight_decay, c, t_});
    return;
  }
  for (auto& p : params_) {
    const auto& g = p.main_grad;  // the update uses c * g
    if (c == 1.0) p.exp_avg.lerp_(g, 1.0 - b1);                            // m = b1 m + (1-b1) g
    else p.exp_avg.mul_(b1).add_(g, (1.0 - b1) * c);                        // m = b1 m + (1-b1) c g
    p.exp_avg_sq.mul_(b2).addcmul_(g, g, (1.0 - b2) * c * c);              // v = b2 v + (1-b2) (c g)^2
    if (p.decay && opts_.weight_decay != 0) p.master.mul_(1.0 - lr * opts_.weight_decay);  // decoupled decay
    auto denom = p.exp_avg_sq.sqrt().div_(bias2_sqrt).add_(opts_.eps);      // sqrt(v_hat) + eps
    p.master.addcdiv_(p.exp_avg, denom, -lr / bias1);                       // w -= lr m_hat / denom
    if (!p.master.is_same(p.param)) p.param.copy_(p.master);                // round to bf16/fp16
  }
}

double AdamW::grad_norm(Comm& world, const MeshCoords& here) { return global_grad_norm(params_, world, here); }

torch::Tensor local_grad_square_sum(const std::vector<TrainableParam>& params, const MeshCoords& here,
                                    std::optional<torch::Device> device_) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.record.counts_once(here)) grads.push_back(p.main_grad);
  const auto device = device_ ? *device_ : params.empty() ? torch::Device(torch::kCPU) : params.front().main_grad.device();
  if (grads.empty()) return torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  // One multi-tensor pass, each norm in the grad's own dtype.
  const auto norms = torch::_foreach_norm(grads, /*ord=*/2);       // [n] 0-d tensors
  return torch::stack(norms).to(torch::kFloat64).square().sum();    // 0-d, fp64
}

double global_grad_norm(const std::vector<TrainableParam>& params, Comm& world, const MeshCoords& here) {
  auto sum = local_grad_square_sum(params, here, world.device()).reshape({1});  // [1] fp64, on the Comm's device
  world.all_reduce(sum, ReduceOp::kSum, carries("the global gradient norm: each rank's sum of squares"));  // counted shards
  return std::sqrt(sum.item<double>());                         // one host sync per step
}

double grad_norm(const std::vector<TrainableParam>& params) {
  return std::sqrt(local_grad_square_sum(params).item<double>());
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

double clip_grad_norm(std::vector<TrainableParam>& params, double max_norm) {
  const double norm = grad_norm(params);
  const double coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0)
    for (auto& p : params) p.main_grad.mul_(coef);
  return norm;
}

double lr_at(int64_t step, const LrSchedule& c) {
  if (step < c.warmup_steps) return c.lr * double(step + 1) / double(c.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, c.steps - c.warmup_steps - 1);
  const double progress = std::min(1.0, double(step - c.warmup_steps) / double(decay_steps));  // 0 -> 1
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

void LossScaler::update(bool step_was_finite) {
  if (!enabled_) return;
  if (!step_was_finite) {
    scale_ = std::max(1.0, scale_ * 0.5);
    clean_steps_ = 0;
  } else if (++clean_steps_ >= growth_interval_) {
    scale_ *= 2.0;
    clean_steps_ = 0;
  }
}

}  // namespace picotron
