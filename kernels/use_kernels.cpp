// kernels/use_kernels.cpp — --kernels fused: the model's slots (and AdamW's) pointed at
// the fused ops of kernels/kernels.h. The model itself (picotron/model.h) knows only slots.
//
// Test: build/tests/unit_tests "[kernels]" (the fused model equals the ATen one on the CPU,
// where each op runs its reference pair)
#include <stdexcept>

#include <torch/torch.h>

#include "kernels/kernels.h"
#include "picotron/model.h"
#include "picotron/optim.h"

namespace picotron::kernels {

Attention parse_attention(const std::string& name) {
  if (name == "sdpa") return Attention::kSdpa;
  if (name == "naive") return Attention::kNaive;
  if (name == "flash-wmma") return Attention::kFlashWmma;
  if (name == "flash-mma") return Attention::kFlashMma;
  throw std::invalid_argument("--attention must be sdpa, naive, flash-wmma or flash-mma, got '" + name + "'");
}

std::string use_fused_kernels(LlamaForCausalLMImpl& model, at::ScalarType dtype, Attention attention) {
  std::string summary = "kernels: fused RMSNorm, RoPE, SwiGLU";
  if (model.model->norm) model.model->norm->norm = kernels::rms_norm;  // (not picotron::rms_norm, ATen's)
  const int64_t hd = model.config.head_dim();
  // The hand-written rungs take bf16/fp16 and Hd 64 or 128; anything else attends through SDPA.
  const bool flash_fits = (dtype == at::kBFloat16 || dtype == at::kHalf) && (hd == 64 || hd == 128);
  const bool hand = attention != Attention::kSdpa && flash_fits;
  const FlashRung rung = attention == Attention::kFlashMma ? FlashRung::kMma
                         : attention == Attention::kNaive  ? FlashRung::kNaive
                                                           : FlashRung::kWmma;
  bool replaced = false;  // the default core was found (no technique installed its own)
  for (auto& [index, layer] : model.model->layers->items) {
    layer->input_layernorm->norm = layer->post_attention_layernorm->norm = kernels::rms_norm;
    layer->self_attn->rotate = [](const torch::Tensor& q, const torch::Tensor& k, const RopeTables& t) {
      return kernels::rope(q, k, t.cos, t.sin);  // q and k in one launch, on their [B, S, n, Hd] layout
    };
    if (layer->mlp) layer->mlp->activation = kernels::swiglu;  // (a mixture of experts' experts: ATen)
    using Core = torch::Tensor (*)(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&);
    const Core* core = layer->self_attn->core.target<Core>();
    if (!core || *core != &causal_attention) continue;  // a technique's core (ring attention) stays
    replaced = true;
    // SDPA: the model's own core already is ATen's scaled_dot_product_attention.
    if (hand)
      layer->self_attn->core = [rung](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return std::get<0>(flash_attention(q, k, v, rung));  // [B, nH, S, Hd]
      };
  }
  if (!replaced) summary += ", attention of the technique that replaced the core";
  else if (hand)
    summary += rung == FlashRung::kMma     ? ", flash attention (mma rung)"
               : rung == FlashRung::kNaive ? ", attention with the S x S scores in global memory (rung 0)"
                                           : ", flash attention (wmma rung)";
  else if (attention != Attention::kSdpa)
    summary += ", attention through SDPA (the hand-written flash attention takes bf16/fp16 and Hd 64 or 128)";
  else summary += ", attention through SDPA";
  if (!model.loss_fn && !model.head) {  // the single-process head and loss
    LlamaForCausalLMImpl* self = &model;
    model.loss_fn = [self](const torch::Tensor& hidden, const torch::Tensor& targets) {
      return linear_cross_entropy(hidden, self->head_weight(), targets);  // the logits one chunk at a time
    };
    summary += ", linear + cross-entropy";
  } else {
    summary += ", the loss of tensor parallelism (vocabulary-parallel)";
  }
  return summary;
}

void use_fused_adamw(AdamWOptions& opts) {
  opts.fused_step = [](std::vector<TrainableParam>& params, const AdamWOptions::StepArgs& a) {
    std::vector<torch::Tensor> weights, master, grads, m, v;
    std::vector<bool> decay;
    for (auto& p : params) {
      weights.push_back(p.param), master.push_back(p.master), grads.push_back(p.main_grad);
      m.push_back(p.exp_avg), v.push_back(p.exp_avg_sq), decay.push_back(p.decay);
    }
    adamw_step(weights, master, grads, m, v, decay,
               {a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_scale, a.step});
  };
}

}  // namespace picotron::kernels
