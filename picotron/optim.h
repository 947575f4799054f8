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
//   per step:         [all-reduce main_grad] -> norm -> AdamW(c * main_grad) -> param = master
//
// Only the passes over the gradients that the precision and the mesh need:
//   * fp32/fp64 runs: param.grad IS main_grad (set before backward), so autograd
//     accumulates in place and there is no copy and no extra buffer;
//   * the norm is one multi-tensor pass (_foreach_norm) in the gradients' own dtype,
//     no fp64 copies (fp32 grads: each tensor's norm has ~1e-7 relative error, far
//     below the 1e-5 the fp32 equivalence runs allow; fp64 runs stay in fp64);
//   * clipping and the fp16 unscaling are folded into the AdamW update as one factor
//     c = clip / loss_scale on the gradient, instead of two more passes.
//
// Global norm over shards: each rank sums the squares of the shards it holds whose copy
// counts (ShardRecord::counts_once: replicas counted once), then one all-reduce of that
// one number over the world. Every rank gets the same norm, so the clipping factor and
// the fp16 overflow decision (the norm is inf/nan) agree everywhere.
//
// AdamW (Loshchilov & Hutter, arXiv 1711.05101), step t = 1, 2, ...:
//   m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
//   w = w - lr wd w   (matrices only: not norms)
//   w = w - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//
// Test: build/tests/unit_tests "[optim]"   (or ctest -L unit)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/config.h"
#include "picotron/shard.h"

namespace picotron {

struct TrainableParam {
  std::string name;
  torch::Tensor param;      // what the model uses (requires grad)
  torch::Tensor main_grad;  // accumulated gradient, fp32 (fp64); data parallelism may make it a bucket view;
                            // IS param.grad when param is fp32/fp64 (see aliases_grad)
  torch::Tensor master;     // fp32 (fp64) weight; aliases `param` when they have the same dtype
  torch::Tensor exp_avg, exp_avg_sq;
  bool decay = true;        // weight decay applies (matrices and embeddings, not norm gains)
  ShardRecord record;       // which piece of the full parameter this is (norms, gathers, checkpoints)

  // param is fp32/fp64 (it is its own master): autograd accumulates straight into main_grad.
  bool aliases_grad() const { return master.is_same(param); }
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  bool fused = false;  // one multi-tensor kernel for every parameter (kernels/adamw.cu; fp32 masters)
};

class AdamW {
 public:
  // `plan` gives each parameter its shard record; without one every parameter is whole
  // and held by this rank alone.
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params, AdamWOptions opts,
        const ShardPlan& plan = {});

  std::vector<TrainableParam>& params() { return params_; }
  // main_grad += param.grad, then drop param.grad (params whose grad a hook already took,
  // or whose grad IS the main grad, are skipped).
  void accumulate_grads();
  // Zero the main grads, and point param.grad at them where the dtypes match.
  void zero_main_grads();
  // One AdamW update of every master weight from grad_scale * main_grad, then param =
  // master. grad_scale folds clipping and fp16 unscaling into the update.
  void step(double lr, double grad_scale = 1.0);
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }  // a resumed run (picotron/resume.h)

 private:
  std::vector<TrainableParam> params_;
  AdamWOptions opts_;
  int64_t t_ = 0;
};

// Sum over the params whose copy counts at `here` of ||main_grad||^2: a 0-d fp64 tensor
// on the gradients' device (no host sync).
// `device`: where the result lives when no parameter counts here (default: the grads').
torch::Tensor local_grad_square_sum(const std::vector<TrainableParam>& params, const MeshCoords& here = {},
                                    std::optional<torch::Device> device = std::nullopt);
// sqrt of the sum of local_grad_square_sum over every rank of `world`: the norm of the
// FULL gradient, each element counted once, identical on every rank.
double global_grad_norm(const std::vector<TrainableParam>& params, Comm& world, const MeshCoords& here);
// The same on one process (every parameter counts): sqrt(sum ||main_grad||^2).
double grad_norm(const std::vector<TrainableParam>& params);
// Clipping factor min(1, max_norm / (norm + 1e-6)); 1 when max_norm == 0 (off) or the
// norm is not finite.
double clip_coefficient(double norm, double max_norm);
// Scale every main_grad by clip_coefficient(norm); returns the norm before clipping.
// (The training loop folds the factor into AdamW::step instead; this is for tests and tools.)
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
  int clean_steps() const { return clean_steps_; }
  void restore(double scale, int clean_steps) {  // a resumed run (picotron/resume.h)
    if (enabled_) scale_ = scale, clean_steps_ = clean_steps;
  }
  // After a step: `step_was_finite` is whether the global grad norm was finite (the
  // optimizer step is skipped when it was not). Grads are unscaled inside AdamW::step.
  void update(bool step_was_finite);

 private:
  bool enabled_;
  double scale_;
  int growth_interval_;
  int clean_steps_ = 0;
};

}  // namespace picotron
