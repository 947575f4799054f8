// runtime/checkpoint/hf.cpp — see hf.h.
#include "runtime/checkpoint/hf.h"

#include <optional>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "picotron/init.h"
#include "runtime/output/output_file.h"
#include "runtime/checkpoint/safetensors.h"

namespace picotron {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& path) {
  std::ifstream in = open_input_file(path.string(), path.string());
  try {
    return parse_json(in, path.string());
  } catch (const nlohmann::json::exception& e) {  // (parse_json's own refusals name the file already)
    throw std::runtime_error(path.string() + ": corrupt JSON: " + std::string(e.what()).substr(0, 120));
  }
}

// Which file of DIR holds each tensor: the index of a sharded checkpoint, or the one file.
std::map<std::string, std::string> weight_files(const fs::path& dir) {
  std::map<std::string, std::string> where;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const json j = read_json(index);
    if (!j.contains("weight_map")) throw std::runtime_error(index.string() + ": no weight_map");
    for (const auto& [name, file] : j.at("weight_map").items()) {
      // A shard is a file of this folder: a path that leads elsewhere ("../x", "/etc/x",
      // "sub/x") is refused, not followed.
      const std::string f = file.is_string() ? file.get<std::string>() : "";
      if (f.empty() || f == "." || f == ".." || fs::path(f).filename().string() != f)
        throw std::runtime_error(index.string() + ": tensor '" + name + "' is in '" + (file.is_string() ? f : file.dump()) +
                                 "', not a file of the folder (paths that lead out of it are refused)");
      where[name] = (dir / f).string();
    }
    return where;
  }
  const fs::path single = dir / "model.safetensors";
  if (!fs::exists(single))
    throw std::runtime_error("--init-from " + dir.string() + ": neither model.safetensors nor model.safetensors.index.json");
  const SafetensorsFile file(single.string());  // (a temporary's entries() would dangle in the loop)
  for (const auto& [name, entry] : file.entries()) where[name] = single.string();
  return where;
}

// A size in config.json: a positive integer (a float such as 1e30 would overflow int64, a 0
// would be blamed on a flag nobody gave); `fallback` when the field is absent.
int64_t size_field(const json& j, const char* field, std::optional<int64_t> fallback = std::nullopt) {
  if (!j.contains(field) && fallback) return *fallback;
  if (!j.contains(field)) throw std::runtime_error(std::string(field) + " is missing");
  const json& v = j.at(field);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    throw std::runtime_error(std::string(field) + " must be a positive integer, got " + v.dump());
  return v.get<int64_t>();
}

// A real in config.json: positive and finite, named as config.json's.
double positive_field(const json& j, const char* field, double fallback) {
  if (!j.contains(field) || j.at(field).is_null()) return fallback;
  const json& v = j.at(field);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
    throw std::runtime_error(std::string(field) + " must be a positive number, got " + v.dump());
  return v.get<double>();
}

// What this model is not: another architecture, another activation, scaled RoPE, biases.
void check_architecture(const json& j, const std::string& where, bool mixtral, std::vector<std::string>& problems) {
  const std::string type = j.value("model_type", "llama");
  if (type != "llama" && !mixtral) problems.push_back(where + ": model_type '" + type + "' is neither llama nor mixtral");
  if (mixtral && j.contains("architectures") &&
      !(j.at("architectures").is_array() && j.at("architectures").size() == 1 &&
        j.at("architectures")[0] == "MixtralForCausalLM"))
    problems.push_back(where + ": model_type mixtral with architectures " + j.at("architectures").dump() +
                       " (expected [\"MixtralForCausalLM\"])");
  if (j.value("hidden_act", "silu") != "silu")
    problems.push_back(where + ": hidden_act '" + j.value("hidden_act", "") + "' (this model is SwiGLU: silu)");
  if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null())
    problems.push_back(where + ": rope_scaling is not supported (plain RoPE only)");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (j.value(bias, false)) problems.push_back(where + ": " + bias + " is true (this model has no biases)");
}

// Mixtral's fields: E experts per layer, top-k routing, the load-balancing loss's weight.
void read_mixtral_fields(const json& j, const std::string& where, int64_t seq_len, LlamaConfig& m,
                         std::vector<std::string>& problems) {
  m.num_local_experts = size_field(j, "num_local_experts", int64_t(8));
  m.num_experts_per_tok = size_field(j, "num_experts_per_tok", int64_t(2));
  const json coef = j.value("router_aux_loss_coef", json(0.001));
  if (!coef.is_number() || !std::isfinite(coef.get<double>()) || coef.get<double>() < 0)
    throw std::runtime_error("router_aux_loss_coef must be a number >= 0, got " + coef.dump());
  m.router_aux_loss_coef = coef.get<double>();
  // Attention here is causal over the whole sequence: a sliding window shorter than
  // it would let transformers' model see less than ours does.
  const json window = j.value("sliding_window", json(nullptr));
  if (!window.is_null() && (!window.is_number_integer() || window.get<int64_t>() < seq_len))
    problems.push_back(where + ": sliding_window " + window.dump() + " is shorter than --seq-len " +
                       std::to_string(seq_len) + " (attention here sees the whole sequence: use null or >= it)");
  // Jitter multiplies the router's input by noise in training: not this model's math.
  const json jitter = j.value("router_jitter_noise", json(0.0));
  if (!jitter.is_number() || jitter.get<double>() != 0)
    problems.push_back(where + ": router_jitter_noise " + jitter.dump() + " (only 0 is supported: no noise on the router)");
}

// LLaMA or Mixtral (a LLaMA whose MLPs are mixtures of experts, expert_parallel/moe.h). A
// field config.json leaves out takes the default of transformers' own config class
// (LlamaConfig's, MixtralConfig's). Throws on the first size or real that is not one.
LlamaConfig parse_hf_config(const json& j, const std::string& where, int64_t seq_len, std::vector<std::string>& problems) {
  const bool mixtral = j.value("model_type", "llama") == "mixtral";
  check_architecture(j, where, mixtral, problems);
  LlamaConfig m;
  m.hidden_size = size_field(j, "hidden_size");
  m.intermediate_size = size_field(j, "intermediate_size");
  m.num_hidden_layers = size_field(j, "num_hidden_layers");
  m.num_attention_heads = size_field(j, "num_attention_heads");
  m.num_key_value_heads = size_field(j, "num_key_value_heads", m.num_attention_heads);
  m.vocab_size = size_field(j, "vocab_size");
  m.rope_theta = positive_field(j, "rope_theta", mixtral ? 1e6 : 10000.0);
  m.max_position_embeddings = size_field(j, "max_position_embeddings", mixtral ? int64_t(4096 * 32) : int64_t(2048));
  m.rms_norm_eps = positive_field(j, "rms_norm_eps", mixtral ? 1e-5 : 1e-6);
  m.tie_word_embeddings = j.value("tie_word_embeddings", false);  // the default of both
  if (mixtral) read_mixtral_fields(j, where, seq_len, m, problems);
  if (j.contains("head_dim") && !j.at("head_dim").is_null() &&
      j.at("head_dim").get<int64_t>() * m.num_attention_heads != m.hidden_size)
    problems.push_back(where + ": head_dim " + j.at("head_dim").dump() + " is not hidden_size / num_attention_heads");
  return m;
}

// A shape flag given on the command line must agree with the folder's config.
void check_shape_flags(const HfShapeFlags& flags, const LlamaConfig& m, const std::string& where,
                       std::vector<std::string>& problems) {
  auto check = [&](const char* flag, const char* field, auto given, auto theirs) {
    for (const auto& f : flags.given)
      if (f == flag && given != theirs) {
        std::ostringstream o;
        o << "--" << flag << " " << given << " disagrees with " << where << " (" << field << " " << theirs << ")";
        problems.push_back(o.str());
      }
  };
  const LlamaConfig& v = flags.values;
  check("hidden-size", "hidden_size", v.hidden_size, m.hidden_size);
  check("intermediate-size", "intermediate_size", v.intermediate_size, m.intermediate_size);
  check("num-hidden-layers", "num_hidden_layers", v.num_hidden_layers, m.num_hidden_layers);
  check("num-attention-heads", "num_attention_heads", v.num_attention_heads, m.num_attention_heads);
  check("num-key-value-heads", "num_key_value_heads", v.num_key_value_heads, m.num_key_value_heads);
  check("vocab-size", "vocab_size", v.vocab_size, m.vocab_size);
  check("rope-theta", "rope_theta", v.rope_theta, m.rope_theta);
  check("max-position-embeddings", "max_position_embeddings", v.max_position_embeddings, m.max_position_embeddings);
  check("rms-norm-eps", "rms_norm_eps", v.rms_norm_eps, m.rms_norm_eps);
  check("tie-word-embeddings", "tie_word_embeddings", v.tie_word_embeddings, m.tie_word_embeddings);
  check("num-local-experts", "num_local_experts", v.num_local_experts, m.num_local_experts);
  check("num-experts-per-tok", "num_experts_per_tok", v.num_experts_per_tok, m.num_experts_per_tok);
  check("router-aux-loss-coef", "router_aux_loss_coef", v.router_aux_loss_coef, m.router_aux_loss_coef);
  for (const auto& f : flags.given)
    if (f == "model")
      problems.push_back("--model " + flags.preset + " and --init-from " + flags.dir + " both give the model's shape: use one");
}

}  // namespace

HfShape read_hf_config(const HfShapeFlags& flags) {
  HfShape out;
  const fs::path path = fs::path(flags.dir) / "config.json";
  json j;
  try {
    j = read_json(path);
  } catch (const std::exception& e) {
    out.problems = {"--init-from " + flags.dir + ": " + e.what()};
    return out;
  }
  const std::string where = path.string();
  if (!j.is_object()) {
    out.problems = {where + ": not a JSON object (a Hugging Face config.json is {\"hidden_size\": ...})"};
    return out;
  }
  LlamaConfig m;
  try {
    m = parse_hf_config(j, where, flags.seq_len, out.problems);
  } catch (const std::exception& e) {
    out.problems.push_back(where + ": " + std::string(e.what()).substr(0, 160));
    return out;
  }
  check_shape_flags(flags, m, where, out.problems);
  out.model = m;
  return out;
}

void load_hf_weights(const std::string& dir, torch::nn::Module& model, const ShardPlan& plan, const LlamaConfig& c) {
  torch::NoGradGuard no_grad;
  const auto where = weight_files(dir);
  // The folder holds the model its config.json describes, no more: an extra tensor (a
  // layer past num_hidden_layers, an lm_head under tied embeddings) means the two disagree.
  const ShardPlan whole = replicated_plan(c);
  for (const auto& [name, file] : where) {
    const bool rotary_cache = name.size() >= 19 && name.compare(name.size() - 19, 19, "rotary_emb.inv_freq") == 0;
    if (!whole.count(name) && !rotary_cache)
      throw std::runtime_error("--init-from " + dir + ": tensor '" + name + "' (in " + fs::path(file).filename().string() +
                               ") is not part of the model config.json describes (" + std::to_string(c.num_hidden_layers) +
                               " layers, tie_word_embeddings " + (c.tie_word_embeddings ? "true" : "false") +
                               (c.is_moe() ? ", " + std::to_string(c.num_local_experts) + " experts per layer" : "") + ")");
  }
  // Every tensor's header against what config.json implies, before any is used: the full
  // shape of its parameter, and a floating-point dtype (an I32 header over F32 bytes would
  // load as integers and train until the run diverges). Impossible shapes (a negative
  // dimension, more than 2^63 bytes) are refused by SafetensorsFile itself.
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  for (const auto& [name, path] : where) {
    auto& file = files[path];
    if (!file) file = std::make_unique<SafetensorsFile>(path);
    if (!file->contains(name))
      throw std::runtime_error("--init-from " + dir + ": the index puts tensor '" + name + "' in " +
                               fs::path(path).filename().string() + ", which does not hold it");
    if (!whole.count(name)) continue;  // a rotary cache, not used
    const auto& entry = file->entries().at(name);
    const auto& want = whole.at(name).full_shape;
    if (entry.shape != want)
      throw std::runtime_error(path + ": tensor '" + name + "' is " + c10::str(torch::IntArrayRef(entry.shape)) +
                               ", the config says " + c10::str(torch::IntArrayRef(want)));
    if (!c10::isFloatingType(entry.dtype))
      throw std::runtime_error(path + ": tensor '" + name + "' is " + safetensors_dtype(entry.dtype) +
                               ", not a floating-point dtype (F32, BF16, F16 or F64): the weights are damaged");
  }
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const auto it = where.find(name);
    if (it == where.end()) throw std::runtime_error("--init-from " + dir + ": no tensor '" + name + "' in its weights");
    auto& file = files.at(it->second);
    const torch::Tensor full = file->read(name);  // [full shape], the file's dtype
    const ShardRecord& record = plan.at(name);
    if (full.sizes() != torch::IntArrayRef(record.full_shape))
      throw std::runtime_error(it->second + ": tensor '" + name + "' is " + c10::str(full.sizes()) + ", the config says " +
                               c10::str(torch::IntArrayRef(record.full_shape)));
    if (full.is_floating_point() && !torch::isfinite(full).all().item<bool>())
      throw std::runtime_error(it->second + ": tensor '" + name + "' holds non-finite values (NaN or Inf): the weights are damaged");
    item.value().copy_(local_slice(full, record));  // my slice, in the run's dtype and device
  }
}

void export_hf(const std::string& dir, const LlamaConfig& c, const NamedTensors& full) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("--export-hf " + dir + ": " + ec.message());
  // LLaMA, or Mixtral for a mixture of experts (transformers' MixtralConfig has no
  // rope_scaling or bias fields; its sliding window is off, its router has no jitter).
  json config = {{"architectures", {c.is_moe() ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
                 {"model_type", c.is_moe() ? "mixtral" : "llama"},
                 {"hidden_act", "silu"},
                 {"hidden_size", c.hidden_size},
                 {"intermediate_size", c.intermediate_size},  // each expert's, in Mixtral
                 {"num_hidden_layers", c.num_hidden_layers},
                 {"num_attention_heads", c.num_attention_heads},
                 {"num_key_value_heads", c.num_key_value_heads},
                 {"head_dim", c.head_dim()},
                 {"vocab_size", c.vocab_size},
                 {"rope_theta", c.rope_theta},
                 {"max_position_embeddings", c.max_position_embeddings},
                 {"rms_norm_eps", c.rms_norm_eps},
                 {"tie_word_embeddings", c.tie_word_embeddings},
                 {"torch_dtype", "float32"}};
  if (c.is_moe()) {
    config["num_local_experts"] = c.num_local_experts;
    config["num_experts_per_tok"] = c.num_experts_per_tok;
    config["router_aux_loss_coef"] = c.router_aux_loss_coef;
    config["output_router_logits"] = false;
    config["router_jitter_noise"] = 0.0;
    config["sliding_window"] = nullptr;
  } else {
    config["rope_scaling"] = nullptr;
    config["attention_bias"] = false;
    config["mlp_bias"] = false;
  }
  write_file("--export-hf", (fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  NamedTensors tensors;
  for (const auto& [name, t] : full) tensors.emplace_back(name, t.to(torch::kFloat32).contiguous());
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}}, "--export-hf");
}

}  // namespace picotron
