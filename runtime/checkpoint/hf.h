// runtime/checkpoint/hf.h — Hugging Face LLaMA and Mixtral folders in and out.
//
//   --init-from DIR   DIR/config.json gives the model's shape (a shape flag given on the
//                     command line that disagrees is an error; the default preset is not
//                     "given"); DIR/model.safetensors, or the shards that
//                     DIR/model.safetensors.index.json lists, give the weights (fp32, bf16 or
//                     fp16). Every rank reads only the tensors of its shard plan.
//                     model_type "mixtral" makes every MLP a mixture of experts
//                     (num_local_experts, num_experts_per_tok, router_aux_loss_coef;
//                     sliding_window null or >= --seq-len, router_jitter_noise 0).
//   --export-hf DIR   config.json + model.safetensors (fp32 masters; a tied lm_head is not
//                     stored, as transformers does), which
//                     transformers.LlamaForCausalLM.from_pretrained(DIR) loads
//                     (MixtralForCausalLM for a mixture of experts).
//
// The names are the same on both sides (model.layers.3.self_attn.q_proj.weight,
// model.layers.3.block_sparse_moe.experts.5.w1.weight, ...), and so is the math: RoPE
// rotates halves (transformers' rotate_half), RMSNorm in fp32, Mixtral's router
// (expert_parallel/moe.h).
//
// Test: ctest -R hf   (tests/scripts/hf_roundtrip.py: logits and loss against transformers;
//                      tests/scripts/hf_mixtral.py: the same for Mixtral, with the load-balancing
//                      loss and one training step)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "runtime/checkpoint/checkpoint.h"
#include "picotron/shard.h"

namespace picotron {

// What --init-from's config.json is read against: the run's flags about the shape.
struct HfShapeFlags {
  std::string dir;  // --init-from DIR
  int64_t seq_len = 0;  // --seq-len: a Mixtral sliding window must cover it
  std::vector<std::string> given;  // the shape flags on the command line ("model": --model)
  LlamaConfig values;  // the shape those flags (and the preset) describe
  std::string preset;  // --model's value
};
struct HfShape {
  std::optional<LlamaConfig> model;  // DIR/config.json's shape, when the file was read and every size parsed
  std::vector<std::string> problems;  // one line each: a missing or corrupt file, an architecture
                                      // this model is not, a shape flag that disagrees
};
// Reads and checks DIR/config.json (the start-up's resolve_config puts its shape into the run's config).
HfShape read_hf_config(const HfShapeFlags& flags);

// Copies every parameter of `plan` (its slice of the full tensor) from DIR's safetensors
// into `model`, converting the dtype. Throws one line naming the file and tensor: a
// tensor missing, misshapen, non-finite, or not part of the model `c` (config.json); an
// index that names a file outside DIR; tensors whose bytes overlap (safetensors.h).
void load_hf_weights(const std::string& dir, torch::nn::Module& model, const ShardPlan& plan, const LlamaConfig& c);

// Writes DIR/config.json and DIR/model.safetensors from full tensors (rank 0).
void export_hf(const std::string& dir, const LlamaConfig& config, const NamedTensors& full);

}  // namespace picotron
