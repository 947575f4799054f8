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

#include <functional>
#include <map>
#include <memory>
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

// What the training loop asks of an optimizer: THE STEP. Whether every rank keeps the
// whole state (AdamW, with data parallelism syncing the gradients) or a 1/N slice of it
// (ZeRO, in zero/, which wraps an AdamW over its slice). One step of train.cpp:
//
//   zero_main_grads()
//   for each micro-batch:  prepare_backward(last) ; loss.backward() ; accumulate_grads()
//   sync_grads()           every rank: the gradient averaged over cp x dp (ZeRO: my slice),
//                          and the sums the techniques registered over their own axes
//   norm = grad_norm(world, here) ; step(lr, clip / loss_scale)
//
// That is all a new optimizer must implement. What a checkpoint, an export or a report
// reads of it is a separate view, OptimizerState (picotron/optim_state.h), given by
// state(): an optimizer without one trains, but cannot be saved or exported.

// A technique's sum over its own axis (sequence parallelism's norm gains over tp, a
// pipeline's tied embedding over its two ends), registered once
// with add_grad_sum. It is called with the gradients the optimizer holds while it syncs
// (whole ones; under ZeRO-2/3 this rank's pieces of them, which the ranks of that axis
// own alike): sums commute with the cp x dp average, so either place gives the same step.
using GradSum = std::function<void(std::vector<TrainableParam>& held)>;

class OptimizerState;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Before a step's first backward: the accumulated gradients back to zero.
  virtual void zero_main_grads() = 0;
  // Before each micro-batch's backward; `last_micro_batch`: its gradients complete the step.
  virtual void prepare_backward(bool last_micro_batch) {}
  // After each micro-batch's backward: its gradients into the main gradients.
  virtual void accumulate_grads() = 0;
  // After the last backward: average the gradients over the data-parallel (cp x dp)
  // group, and run the registered sums (run_grad_sums) where this optimizer holds them.
  virtual void sync_grads() = 0;
  // The norm of the whole averaged gradient, each element counted once: the same on
  // every rank of `world`.
  virtual double grad_norm(Comm& world, const MeshCoords& here) = 0;
  // One update from grad_scale * gradient (grad_scale folds clipping and fp16 unscaling
  // into one factor), then the model's parameters = the updated masters.
  virtual void step(double lr, double grad_scale) = 0;
  // The view for checkpoints, export and reports (picotron/optim_state.h); none: this
  // optimizer cannot be saved, resumed or exported.
  virtual OptimizerState* state() { return nullptr; }

  // Registers a technique's sum over its own axis (above), in the order they should run.
  void add_grad_sum(GradSum sum) { sums_.push_back(std::move(sum)); }

 protected:
  void run_grad_sums(std::vector<TrainableParam>& held) {
    for (auto& sum : sums_) sum(held);
  }
  bool has_grad_sums() const { return !sums_.empty(); }

 private:
  std::vector<GradSum> sums_;
};

// How the gradients of replicas are combined, for an optimizer that keeps whole
// gradients: data_parallel/ provides one (an all-reduce over cp x dp, bucketed and
// overlapped with backward).
class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual void prepare_backward(bool last_micro_batch) = 0;  // no-sync for all but the last
  virtual void finish_gradient_sync() = 0;                   // every gradient averaged
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  // The whole update in one multi-tensor launch (the fused CUDA kernel kernels/adamw.cu,
  // installed by kernels::use_fused_adamw); empty: ATen's elementwise ops, tensor by tensor.
  struct StepArgs {
    double lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t step;
  };
  std::function<void(std::vector<TrainableParam>& params, const StepArgs& args)> fused_step;
};

// Every rank keeps every parameter's master weights and moments (the whole state of its
// tp/pp shard); a GradSync, when given, averages the gradients over the replicas. ZeRO
// (zero/zero_shard.h) runs one over its slice: each TrainableParam a stretch of it.
class AdamW : public Optimizer {
 public:
  // `plan` gives each parameter its shard record; without one every parameter is whole
  // and held by this rank alone.
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params, AdamWOptions opts,
        const ShardPlan& plan = {});
  // Over tensors someone else laid out (ZeRO's slice): master, main_grad and moments given.
  static std::unique_ptr<AdamW> over(std::vector<TrainableParam> laid_out, AdamWOptions opts);
  ~AdamW() override;
  // From now on the gradients are synchronised by `sync` (built over params()).
  void sync_gradients_with(std::unique_ptr<GradSync> sync) { sync_ = std::move(sync); }
  std::vector<TrainableParam>& params() { return params_; }

  // ---- the step (the Optimizer interface) ----
  // Zero the main grads, and point param.grad at them where the dtypes match.
  void zero_main_grads() override;
  void prepare_backward(bool last_micro_batch) override {
    if (sync_) sync_->prepare_backward(last_micro_batch);
  }
  // main_grad += param.grad, then drop param.grad (params whose grad a hook already took,
  // or whose grad IS the main grad, are skipped).
  void accumulate_grads() override;
  void sync_grads() override {
    if (sync_) sync_->finish_gradient_sync();  // waits for the all-reduces launched during backward
    run_grad_sums(params_);
  }
  double grad_norm(Comm& world, const MeshCoords& here) override;
  // One AdamW update of every master weight from grad_scale * main_grad, then param =
  // master. grad_scale folds clipping and fp16 unscaling into the update.
  void step(double lr, double grad_scale = 1.0) override;
  OptimizerState* state() override { return state_.get(); }

  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }  // a resumed run

 private:
  struct LaidOut {};
  AdamW(std::vector<TrainableParam> laid_out, AdamWOptions opts, LaidOut);
  std::vector<TrainableParam> params_;
  AdamWOptions opts_;
  int64_t t_ = 0;
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<OptimizerState> state_;  // its view for checkpoints (picotron/optim_state.cpp)
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

// The learning rate's schedule: linear warmup to lr over warmup_steps, then cosine decay
// to min_lr at the last of `steps` (built from the flags by runtime/cli/settings.h).
struct LrSchedule {
  double lr = 0, min_lr = 0;
  int64_t warmup_steps = 0, steps = 1;
};
double lr_at(int64_t step, const LrSchedule& s);

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
  void restore(double scale, int clean_steps) {  // a resumed run (runtime/checkpoint/resume.h)
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
