// The model's pieces and whole forward against small independent references written
// here in float64 with explicit loops/softmax (tolerance 1e-12: the same math in a
// different order, double precision). Also: init is deterministic and keyed by name.
#include <catch2/catch.hpp>

#include <cmath>

#include "picotron/init.h"
#include "picotron/model.h"
#include "picotron/step_place.h"
#include "runtime/observe/comm_title.h"

using namespace picotron;

namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

LlamaConfig small_config(bool tied) {
  LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.vocab_size = 50;
  c.tie_word_embeddings = tied;
  return c;
}

LlamaForCausalLM make_model(const LlamaConfig& c, uint64_t seed = 7) {
  LlamaForCausalLM m(c);
  m->to(torch::kFloat64);
  init_parameters(*m, seed, 0.2);  // large std: make every term matter
  return m;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Reference RoPE: rotate the pair (j, j + Hd/2) by angle pos * theta^(-2j/Hd).
torch::Tensor ref_rope(const torch::Tensor& x, double theta) {  // [B, n, S, Hd]
  auto out = x.clone();
  const int64_t S = x.size(2), Hd = x.size(3), half = Hd / 2;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < half; ++j) {
      const double angle = double(s) * std::pow(theta, -2.0 * double(j) / double(Hd));
      auto a = x.select(2, s).select(-1, j), b = x.select(2, s).select(-1, j + half);
      out.select(2, s).select(-1, j).copy_(a * std::cos(angle) - b * std::sin(angle));
      out.select(2, s).select(-1, j + half).copy_(b * std::cos(angle) + a * std::sin(angle));
    }
  return out;
}

// Reference attention: explicit causal softmax; query head h reads kv head h / (nH/nKV).
torch::Tensor ref_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t nH = q.size(1), group = nH / k.size(1), S = q.size(2), Hd = q.size(3);
  auto out = torch::zeros_like(q);
  for (int64_t h = 0; h < nH; ++h) {
    auto scores = torch::matmul(q.select(1, h), k.select(1, h / group).transpose(-1, -2)) / std::sqrt(double(Hd));
    auto mask = torch::ones({S, S}, torch::kBool).triu(1);  // j > i is the future
    scores = scores.masked_fill(mask, -INFINITY);
    auto p = torch::exp(scores - std::get<0>(scores.max(-1, true)));
    p = p / p.sum(-1, true);
    out.select(1, h).copy_(torch::matmul(p, v.select(1, h / group)));
  }
  return out;
}

torch::Tensor ref_rmsnorm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x / torch::sqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// Reference model forward, reading weights by their Hugging Face names.
torch::Tensor ref_forward(LlamaForCausalLM& m, const torch::Tensor& tokens) {
  const auto& c = m->config;
  std::map<std::string, torch::Tensor> W;
  for (auto& p : m->named_parameters()) W[p.key()] = p.value().detach();
  const int64_t B = tokens.size(0), S = tokens.size(1), Hd = c.head_dim();
  auto x = W["model.embed_tokens.weight"].index_select(0, tokens.reshape(-1)).view({B, S, c.hidden_size});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto h = ref_rmsnorm(x, W[p + "input_layernorm.weight"], c.rms_norm_eps);
    auto heads = [&](const std::string& n, int64_t count) {
      return torch::matmul(h, W[p + "self_attn." + n + ".weight"].t()).view({B, S, count, Hd}).transpose(1, 2);
    };
    auto q = ref_rope(heads("q_proj", c.num_attention_heads), c.rope_theta);
    auto k = ref_rope(heads("k_proj", c.num_key_value_heads), c.rope_theta);
    auto v = heads("v_proj", c.num_key_value_heads);
    auto a = ref_attention(q, k, v).transpose(1, 2).reshape({B, S, c.hidden_size});
    x = x + torch::matmul(a, W[p + "self_attn.o_proj.weight"].t());
    h = ref_rmsnorm(x, W[p + "post_attention_layernorm.weight"], c.rms_norm_eps);
    auto gate = torch::matmul(h, W[p + "mlp.gate_proj.weight"].t());
    auto up = torch::matmul(h, W[p + "mlp.up_proj.weight"].t());
    x = x + torch::matmul(gate / (1 + torch::exp(-gate)) * up, W[p + "mlp.down_proj.weight"].t());
  }
  x = ref_rmsnorm(x, W["model.norm.weight"], c.rms_norm_eps);
  const auto& head = c.tie_word_embeddings ? W["model.embed_tokens.weight"] : W["lm_head.weight"];
  return torch::matmul(x, head.t());
}

}  // namespace

TEST_CASE("RMSNorm matches x / sqrt(mean(x^2) + eps) * w", "[model]") {
  RMSNorm norm(16, 1e-5);
  norm->to(torch::kFloat64);
  torch::NoGradGuard g;
  norm->weight.copy_(torch::randn({16}, kF64));
  auto x = torch::randn({3, 5, 16}, kF64);
  CHECK(max_abs_diff(norm->forward(x), ref_rmsnorm(x, norm->weight, 1e-5)) < 1e-12);
}

TEST_CASE("RoPE rotates each (j, j + Hd/2) pair by pos * theta^(-2j/Hd)", "[model]") {
  auto x = torch::randn({2, 3, 7, 8}, kF64);  // [B, n, S, Hd]
  auto t = rope_tables(8, 10000.0, torch::arange(7), torch::kFloat64, torch::kCPU);
  CHECK(max_abs_diff(apply_rope(x, t), ref_rope(x, 10000.0)) < 1e-12);
  // Relative positions: <rope(q, i), rope(k, j)> depends only on i - j.
  auto q = torch::randn({1, 1, 1, 8}, kF64).expand({1, 1, 7, 8}).contiguous();
  auto k = torch::randn({1, 1, 1, 8}, kF64).expand({1, 1, 7, 8}).contiguous();
  auto rq = apply_rope(q, t), rk = apply_rope(k, t);
  auto dot = [&](int i, int j) { return (rq[0][0][i] * rk[0][0][j]).sum().item<double>(); };
  CHECK(std::abs(dot(3, 1) - dot(6, 4)) < 1e-12);
}

TEST_CASE("causal grouped-query attention matches explicit softmax", "[model]") {
  auto q = torch::randn({2, 4, 6, 8}, kF64), k = torch::randn({2, 2, 6, 8}, kF64), v = torch::randn({2, 2, 6, 8}, kF64);
  CHECK(max_abs_diff(causal_attention(q, k, v), ref_attention(q, k, v)) < 1e-12);
}

TEST_CASE("whole model forward matches the reference, tied and untied", "[model]") {
  for (bool tied : {true, false}) {
    auto m = make_model(small_config(tied));
    auto tokens = torch::randint(0, 50, {2, 9}, torch::kInt64);
    torch::NoGradGuard g;
    auto logits = m->forward(tokens);
    CHECK(logits.sizes() == torch::IntArrayRef({2, 9, 50}));
    CHECK(max_abs_diff(logits, ref_forward(m, tokens)) < 1e-10);
  }
}

TEST_CASE("built model has exactly count_parameters parameters with Hugging Face names", "[model]") {
  for (bool tied : {true, false}) {
    LlamaForCausalLM m(small_config(tied));
    int64_t n = 0;
    for (auto& p : m->parameters()) n += p.numel();
    CHECK(n == count_parameters(small_config(tied)));
    CHECK(m->named_parameters().contains("model.layers.1.self_attn.k_proj.weight"));
    CHECK(m->named_parameters().contains("lm_head.weight") == !tied);
  }
}

TEST_CASE("init is deterministic and keyed by (seed, name)", "[model][init]") {
  auto a = make_model(small_config(true), 7), b = make_model(small_config(true), 7), c = make_model(small_config(true), 8);
  auto deeper_cfg = small_config(true);
  deeper_cfg.num_hidden_layers = 3;
  auto deeper = make_model(deeper_cfg, 7);
  for (auto& p : a->named_parameters()) {
    const auto& name = p.key();
    CHECK(torch::equal(p.value(), b->named_parameters()[name]));    // same seed: identical
    CHECK(torch::equal(p.value(), deeper->named_parameters()[name]));  // other params do not matter
    if (name.find("norm") == std::string::npos) CHECK_FALSE(torch::equal(p.value(), c->named_parameters()[name]));
    else CHECK(torch::equal(p.value(), torch::ones_like(p.value())));
  }
  // Different names, different values.
  CHECK_FALSE(torch::equal(a->named_parameters()["model.layers.0.mlp.up_proj.weight"],
                           a->named_parameters()["model.layers.1.mlp.up_proj.weight"]));
  // The full-size value is what any rank gets, whatever slice it later keeps.
  auto full = initial_value("model.layers.0.mlp.up_proj.weight", {48, 32}, 7, 0.2).to(torch::kFloat64);
  CHECK(torch::equal(full, a->named_parameters()["model.layers.0.mlp.up_proj.weight"]));
}

// ---- where in the step (picotron/step_place.h) and the titles it makes ----------------------
namespace {
// An identity whose backward writes down the place and pass it sees.
struct SeePlace : torch::autograd::Function<SeePlace> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x, std::vector<StepPlace>* seen) {
    seen->push_back(current_place());
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    (void)ctx;
    CHECK(in_backward());
    return {g[0], torch::Tensor()};
  }
};
}  // namespace

TEST_CASE("a place is set in forward and found again in backward", "[place]") {
  CHECK_FALSE(in_backward());
  {
    PlaceScope micro(StepPlace::of_micro_batch(2));
    PlaceScope layer(StepPlace::of_layer(5));
    CHECK(current_place().micro_batch == 2);
    CHECK(current_place().layer == 5);
  }
  CHECK(current_place().layer == -1);  // both scopes gave the outer place back

  // Backward: a function inside layer 3's attention sees that place while autograd runs it.
  std::vector<StepPlace> forward_seen;
  StepPlace backward_seen;
  auto x = torch::randn({2, 3}, torch::requires_grad());
  torch::Tensor y;
  {
    PlaceScope micro(StepPlace::of_micro_batch(1));
    y = in_place(StepPlace::of_layer(3), x, [&](const torch::Tensor& a) {
      return in_place(StepPlace::of_part(Part::kAttention), a, [&](const torch::Tensor& b) {
        auto seen = SeePlace::apply(b, &forward_seen);
        seen.register_hook([&backward_seen](torch::Tensor g) { backward_seen = current_place(); return g; });
        return seen * 2.0;
      });
    });
  }
  REQUIRE(forward_seen.size() == 1);
  CHECK(forward_seen[0].layer == 3);
  CHECK(forward_seen[0].part == Part::kAttention);
  CHECK(forward_seen[0].micro_batch == 1);
  y.sum().backward();  // outside every scope: only the marks in the graph say where
  CHECK(backward_seen.layer == 3);
  CHECK(backward_seen.part == Part::kAttention);
  CHECK(backward_seen.micro_batch == 1);
  CHECK(torch::allclose(x.grad(), torch::full({2, 3}, 2.0)));  // the marks are identities
}

TEST_CASE("a communication's title: where, the pass, and what its call site says it carries", "[place]") {
  StepPlace p = StepPlace::of_layer(0);
  p.part = Part::kAttention;
  CHECK(comm_title(p, /*backward=*/true, "f: the gradient") == "[layer 0, attention, backward] f: the gradient");
  CHECK(comm_title(p, false, "g") == "[layer 0, attention, forward] g");
  CHECK(comm_title(StepPlace{}, false, "the loss") == "the loss");          // outside the model: no pass
  CHECK(comm_title(StepPlace{}, true, "a bucket") == "[backward] a bucket");  // a gradient hook
  StepPlace message = StepPlace::of_micro_batch(1);
  message.from_stage = 0, message.to_stage = 1;
  CHECK(comm_title(message, false, "pipeline: an activation") == "[micro-batch 1, stage 0 -> 1] pipeline: an activation");
  StepPlace micro = StepPlace::of_micro_batch(4);
  CHECK(comm_title(micro, false, "x", /*with_micro_batch=*/true) == "[micro-batch 4] x");
  CHECK(comm_title(micro, false, "x") == "x");
}
