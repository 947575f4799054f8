// runtime/observe/validation.cpp — see validation.h.
#include "runtime/observe/validation.h"

#include <cmath>

#include "runtime/output/print0.h"

namespace picotron {

std::optional<BatchLoader> validation_batches(const std::shared_ptr<TokenSource>& source,
                                              const ValidationSettings& s, Mesh& mesh,
                                              const std::vector<int64_t>& cp_positions) {
  if (!source) return std::nullopt;
  std::optional<BatchLoader> val;
  val.emplace(source, s.seed, s.seq_len, s.micro_batch_size, s.grad_acc_steps, mesh.shape().dp, mesh.coords().dp);
  if (mesh.shape().cp > 1) val->keep_positions(cp_positions);
  print0(mesh.world().rank(), "validation: " + source->describe() + "; " + std::to_string(s.batches) +
                                  " global batches, " +
                                  (s.every > 0 ? "every " + std::to_string(s.every) + " steps and " : "") +
                                  "after the last step");
  return val;
}

std::string validation_line(double loss, int64_t batches) {
  return "validation loss " + std::to_string(loss) + " (perplexity " + std::to_string(std::exp(loss)) + ") over " +
         std::to_string(batches) + " global batches";
}

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
  mesh.cp_dp().all_reduce_async(sum, ReduceOp::kAvg, carries("the validation loss, averaged")).wait();  // the whole global batch's mean, as the training loss
  return sum.item<double>() / double(batches);
}

}  // namespace picotron
