// picotron/optim.cpp — see optim.h for the math.
#include "picotron/optim.h"

#include <cmath>

namespace picotron {

AdamW::AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params, AdamWOptions opts)
    : opts_(opts) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : named_params) {
    TrainableParam tp;
    tp.name = name;
    tp.param = p;
    // Optimizer math in fp32 — or fp64 when the whole run is fp64 (the equivalence tests).
    const auto state_dtype = p.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    tp.master = p.scalar_type() == state_dtype ? p : p.detach().to(state_dtype).clone();
    tp.main_grad = torch::zeros_like(tp.master);
    tp.exp_avg = torch::zeros_like(tp.master);
    tp.exp_avg_sq = torch::zeros_like(tp.master);
    tp.decay = p.dim() >= 2;
    params_.push_back(std::move(tp));
  }
}

void AdamW::accumulate_grads() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    auto& g = p.param.mutable_grad();
    if (!g.defined()) continue;  // already taken (a data-parallel hook) or unused
    p.main_grad.add_(g);         // bf16 -> fp32 happens in the add
    g = torch::Tensor();         // free it: the next micro-batch writes a fresh one
  }
}

void AdamW::zero_main_grads() {
  for (auto& p : params_) p.main_grad.zero_();
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++t_;
  const double bias1 = 1.0 - std::pow(opts_.beta1, double(t_));
  const double bias2 = 1.0 - std::pow(opts_.beta2, double(t_));
  for (auto& p : params_) {
    const auto& g = p.main_grad;
    p.exp_avg.mul_(opts_.beta1).add_(g, 1.0 - opts_.beta1);                 // m = b1 m + (1-b1) g
    p.exp_avg_sq.mul_(opts_.beta2).addcmul_(g, g, 1.0 - opts_.beta2);       // v = b2 v + (1-b2) g^2
    if (p.decay && opts_.weight_decay != 0) p.master.mul_(1.0 - lr * opts_.weight_decay);  // decoupled decay
    auto denom = (p.exp_avg_sq / bias2).sqrt_().add_(opts_.eps);            // sqrt(v_hat) + eps
    p.master.addcdiv_(p.exp_avg, denom, -lr / bias1);                       // w -= lr m_hat / denom
    if (!p.master.is_same(p.param)) p.param.copy_(p.master);                // round to bf16/fp16
  }
}

double grad_norm(const std::vector<TrainableParam>& params) {
  torch::NoGradGuard no_grad;
  if (params.empty()) return 0.0;
  std::vector<torch::Tensor> squares;
  for (const auto& p : params) squares.push_back(p.main_grad.to(torch::kFloat64).pow(2).sum());
  return std::sqrt(torch::stack(squares).sum().item<double>());  // one device sync per step
}

double clip_grad_norm(std::vector<TrainableParam>& params, double max_norm) {
  const double norm = grad_norm(params);
  if (max_norm > 0 && std::isfinite(norm)) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0)
      for (auto& p : params) p.main_grad.mul_(coef);
  }
  return norm;
}

double lr_at(int64_t step, const TrainConfig& c) {
  if (step < c.warmup_steps) return c.lr * double(step + 1) / double(c.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, c.steps - c.warmup_steps - 1);
  const double progress = std::min(1.0, double(step - c.warmup_steps) / double(decay_steps));  // 0 -> 1
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

bool LossScaler::unscale_and_check(std::vector<TrainableParam>& params) {
  if (!enabled_) return true;
  torch::NoGradGuard no_grad;
  for (auto& p : params) p.main_grad.mul_(1.0 / scale_);
  return std::isfinite(grad_norm(params));
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
