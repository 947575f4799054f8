// picotron/optim.h — AdamW with fp32 master weights, the LR schedule, global grad-norm
// clipping and fp16 loss scaling.
//
// Mixed precision (Micikevicius et al., arXiv 1710.03740), as the Playbook describes it:
//
//   param       the weight the model computes with            bf16/fp16 (or fp32/fp64)
//   grad        what autograd writes for one micro-batch        same dtype as param
//   main_grad   sum of grads over the micro-batches of a step   fp32 (fp64 for fp64 runs)
//   master      the weight AdamW updates                        fp32 (fp64); for fp32/fp64
//                                                               runs it IS the param
//   exp_avg, exp_avg_sq   AdamW moments                         fp32 (fp64)
//
//   per micro-batch:  backward; main_grad += grad; grad = None   (accumulate_grads, or a
//                                                                  data-parallel hook)
//   per step:         [all-reduce main_grad] -> clip -> AdamW on master -> param = master
//
// AdamW (Loshchilov & Hutter, arXiv 1711.05101), step t = 1, 2, ...:
//   m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
//   w = w - lr wd w   (matrices only: not norms)
//   w = w - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//
// Test: build/tests/unit_tests "[optim]"   (or ctest -L unit)
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/config.h"

namespace picotron {

struct TrainableParam {
  std::string name;
  torch::Tensor param;      // what the model uses (requires grad)
  torch::Tensor main_grad;  // accumulated gradient, fp32 (fp64); data parallelism may make it a bucket view
  torch::Tensor master;     // fp32 (fp64) weight; aliases `param` when they have the same dtype
  torch::Tensor exp_avg, exp_avg_sq;
  bool decay = true;        // weight decay applies (matrices and embeddings, not norm gains)
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params, AdamWOptions opts);

  std::vector<TrainableParam>& params() { return params_; }
  // main_grad += param.grad, then drop param.grad (params whose grad a hook already took are skipped).
  void accumulate_grads();
  void zero_main_grads();
  // One AdamW update of every master weight from its main_grad, then param = master.
  void step(double lr);
  int64_t steps_taken() const { return t_; }

 private:
  std::vector<TrainableParam> params_;
  AdamWOptions opts_;
  int64_t t_ = 0;
};

// sqrt(sum over params of ||main_grad||^2), accumulated in fp64.
double grad_norm(const std::vector<TrainableParam>& params);
// Scale every main_grad by min(1, max_norm / (norm + 1e-6)); returns the norm before clipping.
// max_norm == 0 turns clipping off (the norm is still returned for logging).
double clip_grad_norm(std::vector<TrainableParam>& params, double max_norm);

// Linear warmup to lr over warmup_steps, then cosine decay to min_lr at the last step.
double lr_at(int64_t step, const TrainConfig& c);

// fp16 only: the loss is multiplied by `scale` before backward so small gradients do
// not flush to zero; gradients are divided by it before the update. A step whose
// gradients overflowed (inf/nan) is skipped and the scale halved; after
// `growth_interval` clean steps it doubles.
class LossScaler {
 public:
  explicit LossScaler(bool enabled, double initial_scale = 65536.0, int growth_interval = 1000)
      : enabled_(enabled), scale_(enabled ? initial_scale : 1.0), growth_interval_(growth_interval) {}
  double scale() const { return scale_; }
  // Divide main grads by the scale; returns false (skip the step) if any is inf/nan.
  bool unscale_and_check(std::vector<TrainableParam>& params);
  void update(bool step_was_finite);

 private:
  bool enabled_;
  double scale_;
  int growth_interval_;
  int clean_steps_ = 0;
};

}  // namespace picotron
