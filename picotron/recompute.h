// picotron/recompute.h — activation recomputation (the Playbook's "Activation
// recomputation"; Korthikanti et al., arXiv 2205.05198): keep fewer activations for
// backward and compute them again when backward needs them.
//
//   none       autograd keeps every intermediate a layer's backward reads
//   selective  the cheap, memory-hungry parts are recomputed: the attention core (its
//              softmax), the RMSNorms (their fp32 copies) and the SwiGLU activation;
//              the projections' inputs and outputs (the matmuls) are kept
//   full       each decoder layer keeps only its input; backward runs its forward again
//              (one more forward of every layer: about a third more compute)
//
// One mechanism serves all three: checkpoint(fn, inputs) runs fn without recording a
// graph, keeps only the inputs, and in backward runs fn again with autograd on and
// backpropagates through that fresh graph (parameters inside fn get their gradients
// there, through their usual accumulators and hooks).
//
// Test: ctest -R "equivalence.recompute|unit_tests.*recompute"
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/model.h"

namespace picotron {

enum class Recompute { kNone, kSelective, kFull };
Recompute parse_recompute(const std::string& name);  // throws naming --recompute
const char* recompute_name(Recompute r);

// fn(inputs) -> one tensor, its intermediates not kept: recomputed in backward. Without
// grad mode it is just fn(inputs). (One backward per forward: backward frees fn.)
torch::Tensor checkpoint(std::function<torch::Tensor(const std::vector<torch::Tensor>&)> fn,
                         const std::vector<torch::Tensor>& inputs);
// The same for fn with several outputs (a MoE layer: its output and its routing statistics).
std::vector<torch::Tensor> checkpoint_all(
    std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)> fn,
    const std::vector<torch::Tensor>& inputs);

// What a layer recorded for the loss that must keep its gradient path when the layer runs
// again in backward (a mixture of experts' routing probabilities): the model's layer_stats
// gives it when it is one of these (expert_parallel/moe.h's RouterLog is). recorded: the
// tensor layer `layer` recorded (undefined: none); rerecord: the same tensor again, from
// the re-run's graph.
class RecomputedRecords {
 public:
  virtual ~RecomputedRecords() = default;
  virtual torch::Tensor recorded(int64_t layer) = 0;
  virtual void rerecord(int64_t layer, const torch::Tensor& t) = 0;
};

// Install the mode in the model: full wraps its layer runner, selective its attention
// cores, norms and MLP activations. Call after the other techniques and the fused kernels
// (kernels/use_kernels.cpp) set their slots: it wraps the functions it finds there (context
// parallelism's attention core, a fused norm), and a slot set later would drop it. Before ZeRO-3
// attaches (which gathers around the runner).
void apply_recompute(LlamaForCausalLM& model, Recompute mode);

}  // namespace picotron
