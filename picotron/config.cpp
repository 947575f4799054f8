// picotron/config.cpp — the shapes of published models, the exact parameter count of any
// shape, and the names of the precision and data-parallel modes. `tiny` is ours: it
// trains in a minute on a laptop CPU and is what the tests use. tests/unit/test_config.cpp
// checks every preset's count against the published one. (The flags that fill a
// TrainConfig: runtime/cli/flag_table.cpp.)
//
// Test: build/tests/unit_tests "[config]"
#include <stdexcept>

#include "picotron/config.h"

namespace picotron {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFP32: return "fp32";
    case Precision::kFP64: return "fp64";
    case Precision::kBF16: return "bf16";
    case Precision::kFP16: return "fp16";
  }
  return "?";
}

const char* dp_mode_name(DpMode m) { return m == DpMode::kNaive ? "naive" : "bucketed"; }

namespace {

// Shapes of published models (their Hugging Face config.json). `tiny` is ours: it
// trains in a minute on a laptop CPU and is what the tests use.
struct Preset {
  const char* name;
  LlamaConfig config;
};

LlamaConfig make(int64_t h, int64_t i, int64_t l, int64_t nh, int64_t nkv, int64_t v,
                 double theta, int64_t max_pos, double eps, bool tied) {
  LlamaConfig c;
  c.hidden_size = h;
  c.intermediate_size = i;
  c.num_hidden_layers = l;
  c.num_attention_heads = nh;
  c.num_key_value_heads = nkv;
  c.vocab_size = v;
  c.rope_theta = theta;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = eps;
  c.tie_word_embeddings = tied;
  return c;
}

LlamaConfig moe(LlamaConfig c, int64_t experts, int64_t top_k, double aux_coef) {
  c.num_local_experts = experts;
  c.num_experts_per_tok = top_k;
  c.router_aux_loss_coef = aux_coef;
  return c;
}

const std::vector<Preset>& presets() {
  //                      H     I      L   nH  nKV  V       theta     max_pos eps    tied
  static const std::vector<Preset> kPresets = {
      {"tiny",        make(128,  384,   4,  4,  2,  256,    10000.0,  2048,  1e-5,  true)},
      {"smollm-135m", make(576,  1536,  30, 9,  3,  49152,  10000.0,  2048,  1e-5,  true)},
      {"smollm-360m", make(960,  2560,  32, 15, 5,  49152,  10000.0,  2048,  1e-5,  true)},
      {"smollm-1.7b", make(2048, 8192,  24, 32, 32, 49152,  10000.0,  2048,  1e-5,  true)},
      {"llama2-7b",   make(4096, 11008, 32, 32, 32, 32000,  10000.0,  4096,  1e-5,  false)},
      {"llama3-8b",   make(4096, 14336, 32, 32, 8,  128256, 500000.0, 8192,  1e-5,  false)},
      {"llama3-70b",  make(8192, 28672, 80, 64, 8,  128256, 500000.0, 8192,  1e-5,  false)},
      {"llama3.2-1b", make(2048, 8192,  16, 32, 8,  128256, 500000.0, 131072, 1e-5, true)},
      {"llama3.2-3b", make(3072, 8192,  28, 24, 8,  128256, 500000.0, 131072, 1e-5, true)},
      // Mixture of experts (E experts per layer, top-k; router_aux_loss_coef as published)
      {"tiny-moe",    moe(make(128,  192,   4,  4,  2,  256,    10000.0,  2048,  1e-5,  true), 4, 2, 0.02)},
      {"mixtral-8x7b", moe(make(4096, 14336, 32, 32, 8,  32000,  1e6,      32768, 1e-5,  false), 8, 2, 0.02)},
  };
  return kPresets;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

LlamaConfig preset(const std::string& name) {
  for (const auto& p : presets())
    if (name == p.name) return p.config;
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("--model: unknown preset '" + name + "' (known: " + known + ")");
}

int64_t count_parameters(const LlamaConfig& c) {
  const int64_t h = c.hidden_size, kv_dim = c.num_key_value_heads * c.head_dim();
  const int64_t attention = h * h /*q*/ + 2 * h * kv_dim /*k, v*/ + h * h /*o*/;
  // gate, up, down; MoE: E of them and the router [E, H]
  const int64_t mlp = c.is_moe() ? c.num_local_experts * (3 * h * c.intermediate_size + h)
                                 : 3 * h * c.intermediate_size;
  const int64_t norms = 2 * h;                        // input + post-attention RMSNorm
  const int64_t embedding = c.vocab_size * h;
  return embedding + c.num_hidden_layers * (attention + mlp + norms) + h /*final norm*/ +
         (c.tie_word_embeddings ? 0 : embedding /*lm_head*/);
}

}  // namespace picotron
