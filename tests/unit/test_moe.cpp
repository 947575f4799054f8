// The mixture-of-experts block alone (expert_parallel/moe.h), one process: routing, the
// load-balancing loss at its two ends (balanced, and one expert forced hot), the
// routing statistics of the step line, and Mixtral-8x7B's published size.
//
// Test: build/tests/unit_tests "[moe]"
#include <catch2/catch.hpp>

#include "expert_parallel/moe.h"
#include "picotron/init.h"
#include "picotron/model.h"
#include "runtime/observe/report.h"

using namespace picotron;

TEST_CASE("moe: top-k routing with Mixtral's renormalised weights", "[moe]") {
  const auto p = torch::tensor({{0.1, 0.5, 0.3, 0.1}, {0.4, 0.1, 0.1, 0.4}}, torch::kFloat64);  // [T=2, E=4]
  const Routing r = route(p, 2, torch::kFloat64);
  CHECK(r.experts[0][0].item<int64_t>() == 1);
  CHECK(r.experts[0][1].item<int64_t>() == 2);
  CHECK(r.weights[0][0].item<double>() == Approx(0.5 / 0.8));
  CHECK(r.weights.sum(-1).allclose(torch::ones({2}, torch::kFloat64)));
}

TEST_CASE("moe: the balancing loss is k when balanced, about E with one expert forced hot", "[moe]") {
  const int64_t E = 4, k = 2, T = 64;
  RouterLog balanced(E, 1.0, torch::kFloat64);  // every expert gets k·T/E pairs and probability 1/E
  balanced.layers[0] = {torch::full({E}, double(k * T / E), torch::kFloat64), torch::full({E}, double(T) / E, torch::kFloat64), T};
  CHECK(balanced.aux_loss(E, 1.0).item<double>() == Approx(double(k)));

  LlamaConfig c;  // one MoE layer; the router forced: expert 0 wins every token
  c.hidden_size = 8, c.intermediate_size = 16, c.num_hidden_layers = 1, c.num_attention_heads = 2;
  c.num_key_value_heads = 2, c.vocab_size = 16, c.num_local_experts = E, c.num_experts_per_tok = k;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  LlamaForCausalLM model(c, replicated_plan(c), opts);
  const auto log = add_experts(*model, replicated_plan(c), opts);
  init_parameters(*model, 1, 0.02);
  MoEImpl* moe = moe_of(*model->model->layers->items[0].second);
  {
    torch::NoGradGuard no_grad;
    moe->gate.fill_(-1.0);
    moe->gate[0].fill_(1.0);  // logits: +H for expert 0, -H for the others
  }
  moe->forward(torch::ones({1, T, c.hidden_size}, torch::kFloat64));
  const auto counts = log->counts();  // [E]
  CHECK(counts[0].item<double>() == double(T));      // every token's first choice
  CHECK(counts.sum().item<double>() == double(k * T));
  const double aux = log->aux_loss(E, 1.0).item<double>();
  CHECK(aux > 0.99 * double(E));  // f_0 = 1, P_0 ~ 1: E x 1 x 1, the far end from k
  StepStats s;
  s.tokens_per_expert = {counts[0].item<double>(), counts[1].item<double>(), counts[2].item<double>(), counts[3].item<double>()};
  CHECK(s.expert_imbalance() == Approx(double(E) / double(k)));  // T / (k·T / E)
  CHECK_THAT(step_line(s), Catch::Contains("experts max/mean 2.00"));
}

TEST_CASE("moe: Mixtral-8x7B has its published 46,702,792,704 parameters", "[moe]") {
  CHECK(count_parameters(preset("mixtral-8x7b")) == 46702792704LL);
  const auto shapes = parameter_shapes(preset("tiny-moe"));
  int64_t total = 0;
  for (const auto& [name, shape] : shapes) total += shape[0] * (shape.size() > 1 ? shape[1] : 1);
  CHECK(total == count_parameters(preset("tiny-moe")));
}
