// picotron/config.h — the model's shape (LlamaConfig) and the step's precision and
// data-parallel modes: what the step itself reads.
//
// LlamaConfig uses Hugging Face's LlamaConfig field names, so a config.json from the
// Hub reads across one to one. Presets reproduce published models' shapes exactly
// (tests/unit/test_config.cpp checks their parameter counts against the published ones).
//
// Every other setting of a run is the runtime's: TrainConfig (runtime/cli/train_config.h),
// filled from the command line; the step and the techniques get small settings structs
// built from it (runtime/cli/settings.h).
//
// This file includes no LibTorch header: it compiles in a second and is tested alone.
//
// Test: build/tests/unit_tests "[config]"   (or ctest -L unit)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace picotron {

struct LlamaConfig {
  int64_t hidden_size = 128;               // H: width of the residual stream
  int64_t intermediate_size = 384;         // I: width of the SwiGLU MLP
  int64_t num_hidden_layers = 4;           // L: decoder layers
  int64_t num_attention_heads = 4;         // nH: query heads; Hd = H / nH
  int64_t num_key_value_heads = 2;         // nKV: key/value heads (grouped-query attention)
  int64_t vocab_size = 256;                // V
  double rope_theta = 10000.0;             // RoPE base
  int64_t max_position_embeddings = 2048;  // longest sequence the RoPE tables cover
  double rms_norm_eps = 1e-5;              // RMSNorm epsilon
  bool tie_word_embeddings = true;         // lm_head shares the embedding matrix
  // Mixture of experts (Mixtral; expert_parallel/moe.h): 0 = every layer has one dense MLP.
  int64_t num_local_experts = 0;           // E: experts per MoE layer, each an I-wide SwiGLU MLP
  int64_t num_experts_per_tok = 2;         // k: experts each token is routed to (top-k of the router)
  double router_aux_loss_coef = 0.02;      // c: weight of the load-balancing loss added to the loss
  bool is_moe() const { return num_local_experts > 0; }

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

// Names of the presets, in the order `--help` lists them.
std::vector<std::string> preset_names();
// The preset's shapes; throws std::invalid_argument naming --model for an unknown name.
LlamaConfig preset(const std::string& name);
// Exact number of parameters (no tensor is allocated): embeddings, every layer's
// attention (q, k, v, o), MLP (gate, up, down) and two RMSNorms, the final norm, and
// the lm_head unless tied.
int64_t count_parameters(const LlamaConfig& c);

enum class Precision { kFP32, kFP64, kBF16, kFP16 };
enum class DpMode { kNaive, kBucketed };
const char* precision_name(Precision p);
const char* dp_mode_name(DpMode m);


}  // namespace picotron
