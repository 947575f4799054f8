// picotron/runtime/validation.cpp — see validation.h.
#include "picotron/runtime/validation.h"

namespace picotron {

double validation_loss(LlamaForCausalLM& model, Pipeline* pipeline, Mesh& mesh, const BatchLoader& val,
                       int64_t batches, int64_t grad_acc_steps, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  for (int64_t k = 0; k < batches; ++k) {
    if (pipeline) {
      sum += pipeline->evaluate(k, val);  // the last stage's losses, on every pp rank
      continue;
    }
    for (int64_t micro = 0; micro < grad_acc_steps; ++micro) {
      const Batch batch = val.micro_batch(k, micro);
      sum += (model->loss(batch.inputs.to(device), batch.targets.to(device), batch.positions) / double(grad_acc_steps))
                 .to(torch::kFloat64);
    }
  }
  mesh.cp_dp().all_reduce_async(sum, ReduceOp::kAvg).wait();  // the whole global batch's mean, as the training loss
  return sum.item<double>() / double(batches);
}

}  // namespace picotron
