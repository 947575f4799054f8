// kernels/kernels.h — the fused CUDA kernels and their ATen references: the one header
// the rest of the project includes.
//
//   reference::X   plain ATen, any device: the CPU path and the oracle of the tests
//   cuda::X        the fused kernel (kernels/X.cu), CUDA tensors only; attention's rungs:
//                  kernels/attention_{naive,wmma,mma}.cu (below, and kernels/README.md)
//   the autograd ops below: what the model, the loss and the optimizer call under
//   --kernels fused (kernels/autograd.cpp wraps each cuda:: forward/backward pair;
//   kernels/use_kernels.cpp points the model's slots and AdamW at them)
//
// The signatures of reference:: and cuda:: are one list, kernels/ops.h, included in
// both namespaces. kernels/README.md explains each fusion: what memory traffic it saves.
//
// Test: build/tests/unit_tests "[kernels]" (references on the CPU; the CUDA cases skip
// without a GPU)     Speed: build/bench/bench_kernels (a GPU)
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>

namespace picotron::kernels {

// The hyper-parameters of one multi-tensor AdamW step (ops.h: adamw_step).
struct AdamWHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, grad_scale = 1.0;
  int64_t step = 1;  // t, 1-based: the bias corrections use b^t
};

namespace reference {
#include "kernels/ops.h"
}  // namespace reference

namespace cuda {
#include "kernels/ops.h"
// The attention ladder's rung 2 (kernels/attention_mma.cu) and its rung 0, the S x S scores
// in global memory (kernels/attention_naive.cu): the same contract as rung 1's
// flash_attention_forward / _backward above (kernels/attention_wmma.cu); their reference is
// reference::flash_attention_*. Each rung alone: build/kernels/attention_rung N.
std::tuple<at::Tensor, at::Tensor> flash_attention_mma_forward(const at::Tensor& q, const at::Tensor& k,
                                                               const at::Tensor& v, double scale, bool causal);
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_mma_backward(const at::Tensor& dout, const at::Tensor& q,
                                                                            const at::Tensor& k, const at::Tensor& v,
                                                                            const at::Tensor& out, const at::Tensor& lse,
                                                                            double scale, bool causal);
std::tuple<at::Tensor, at::Tensor> attention_naive_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                           double scale, bool causal);
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_naive_backward(const at::Tensor& dout, const at::Tensor& q,
                                                                        const at::Tensor& k, const at::Tensor& v,
                                                                        const at::Tensor& out, const at::Tensor& lse,
                                                                        double scale, bool causal);
}  // namespace cuda

// ---- which implementation runs ---------------------------------------------------
// Whether this build holds the CUDA kernels (PICOTRON_WITH_CUDA).
bool fused_built();

// ---- autograd ops over the fused kernels (CUDA tensors) ---------------------------
// Each is a torch::autograd::Function whose forward and backward are the cuda:: pair.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);  // [..., H] -> [..., H]
// q [B, S, nH, Hd], k [B, S, nKV, Hd] -> rotated (q, k), one launch each way.
std::tuple<at::Tensor, at::Tensor> rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                        const at::Tensor& sin);
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);  // [..., I] -> [..., I]
// Mean cross-entropy over the rows whose target is not -100: logits [N, V] -> scalar fp32.
// dlogits are computed in the forward pass and kept (in the logits' dtype) for backward.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets);
// hidden [N, H] and the head weight [V, H] in, mean loss out: the logits exist one chunk
// of rows at a time (chunk_rows x V), never whole. Gradients for hidden and weight.
at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows = 4096);
// The rungs of the hand-written attention ladder (kernels/README.md), slowest first:
//   kNaive kernels/attention_naive.cu: the S x S scores in global memory, a thread per element
//   kWmma  kernels/attention_wmma.cu: WMMA 16x16x16, S, P and O staged in shared memory
//   kMma   kernels/attention_mma.cu: mma.sync m16n8k16, S, P, O in registers, cp.async
enum class FlashRung { kNaive, kWmma, kMma };
// Causal attention, GQA without repeating K/V: q [B, nH, S, Hd], k, v [B, nKV, S, Hd]
// -> (out [B, nH, S, Hd], lse [B, nH, S] fp32). Gradients for q, k, v (not through lse).
// On CUDA tensors the rung's kernels run; elsewhere the reference.
std::tuple<at::Tensor, at::Tensor> flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                   FlashRung rung = FlashRung::kWmma);
// The multi-tensor AdamW step on the tensors' device (cuda:: on a GPU, else reference::).
void adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& master,
                const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
                const std::vector<at::Tensor>& exp_avg_sq, const std::vector<bool>& decay, const AdamWHyper& h);

}  // namespace picotron::kernels

namespace picotron {
class LlamaForCausalLMImpl;
struct AdamWOptions;
namespace kernels {
// Whether the kernels --kernels auto selects have passed their tests (tests/unit/test_kernels.cpp,
// "[gpu]") on a GPU: a user's first GPU run must not execute code no one has executed.
// They have (RMSNorm, RoPE, SwiGLU, cross-entropy, AdamW on an H100: kernels/README.md,
// "Measured"), so auto means fused on CUDA in bf16/fp16/fp32, with attention through SDPA.
inline constexpr bool kVerifiedOnGpu = true;

// --kernels auto | fused | aten: whether a run uses the fused kernels. auto means fused on
// CUDA, except in fp64 (the kernels compute in fp32), once they passed on a GPU, and only in
// a build that holds them (`built`; the planner plans for such a build).
inline bool fused_chosen(const std::string& kernels, bool cuda, bool fp64, bool built) {
  return kernels == "fused" || (kernels == "auto" && kVerifiedOnGpu && cuda && !fp64 && built);
}

// The attention core under --kernels fused (--attention).
//   kSdpa       ATen's scaled_dot_product_attention (its flash / cuDNN / memory-efficient
//               kernels): the fastest verified on a GPU, the default
//   kNaive      the ladder's rung 0 (FlashRung::kNaive): the S x S scores in global memory
//   kFlashWmma  the ladder's first rung (FlashRung::kWmma)     kFlashMma  its second
enum class Attention { kSdpa, kNaive, kFlashWmma, kFlashMma };
Attention parse_attention(const std::string& name);  // "sdpa" | "naive" | "flash-wmma" | "flash-mma"

// --kernels fused: RMSNorm, RoPE and SwiGLU through the ops above; the attention core
// (`attention`) and the loss too where they are still the model's defaults (a
// technique's ring attention or vocabulary-parallel loss stays); the hand-written flash
// attention where it takes the dtype and head dim (bf16/fp16, Hd 64 or 128), SDPA
// otherwise. Returns one line: what is fused.
std::string use_fused_kernels(LlamaForCausalLMImpl& model, at::ScalarType dtype, Attention attention = Attention::kSdpa);
// --kernels fused: AdamW's whole update in one multi-tensor launch (kernels/adamw.cu).
void use_fused_adamw(AdamWOptions& opts);
}  // namespace kernels
}  // namespace picotron
