// The seams every technique plugs into, tested without communication: shard records
// (pure arithmetic), plans, a model built from a plan (only its shards, on its dtype),
// init slicing, and the model's slots (projection replacement, tied head, loss, layer
// runner, global layer names, RoPE positions, local head counts).
#include <catch2/catch.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "picotron/init.h"
#include "picotron/model.h"
#include "picotron/shard.h"

using namespace picotron;

namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

LlamaConfig small_config(bool tied = true) {
  LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.vocab_size = 50;
  c.tie_word_embeddings = tied;
  return c;
}

}  // namespace

TEST_CASE("even_slice cuts n items into near-equal pieces, the first n % count one longer", "[shard]") {
  // 10 over 3: [0,4) [4,7) [7,10)
  CHECK(even_slice(10, 0, 3).offset == 0);
  CHECK(even_slice(10, 0, 3).length == 4);
  CHECK(even_slice(10, 1, 3).offset == 4);
  CHECK(even_slice(10, 1, 3).length == 3);
  CHECK(even_slice(10, 2, 3).offset == 7);
  CHECK(even_slice(10, 2, 3).length == 3);
  for (int64_t n : {0, 1, 7, 64, 1001})
    for (int count : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int i = 0; i < count; ++i) {  // pieces tile [0, n) in order, lengths differ by at most 1
        const Slice s = even_slice(n, i, count);
        CHECK(s.offset == next);
        CHECK(s.length >= n / count);
        CHECK(s.length <= n / count + 1);
        next = s.offset + s.length;
      }
      CHECK(next == n);
    }
  CHECK_THROWS(even_slice(10, 3, 3));
}

TEST_CASE("a shard record's local shape, and which copy counts", "[shard]") {
  ShardRecord r;
  r.name = "model.layers.0.self_attn.q_proj.weight";
  r.full_shape = {32, 16};
  r.replica_axes = {Axis::kDp, Axis::kCp, Axis::kTp};
  CHECK(r.local_shape() == std::vector<int64_t>{32, 16});
  CHECK(r.local_numel() == 512);
  r.split(/*dim=*/0, Axis::kTp, /*index=*/1, /*count=*/3);  // 32 rows over 3: 11, 11, 10
  CHECK(r.local_shape() == std::vector<int64_t>{11, 16});
  CHECK(r.slice().offset == 11);
  CHECK(r.full_numel() == 512);
  CHECK((r.replica_axes == std::vector<Axis>{Axis::kDp, Axis::kCp}));  // tp now splits it
  // Its copy counts at dp 0, cp 0 of its stage, whatever the tp coordinate (tp holds pieces).
  CHECK(r.counts_once({/*dp=*/0, /*pp=*/0, /*cp=*/0, /*tp=*/1}));
  CHECK_FALSE(r.counts_once({/*dp=*/1, /*pp=*/0, /*cp=*/0, /*tp=*/1}));
  CHECK_FALSE(r.counts_once({/*dp=*/0, /*pp=*/0, /*cp=*/1, /*tp=*/1}));
  CHECK_FALSE(r.counts_once({/*dp=*/0, /*pp=*/1, /*cp=*/0, /*tp=*/1}));  // another stage's copy (tied head)
  ShardRecord small = r;
  CHECK_THROWS_WITH(small.split(1, Axis::kTp, 0, 32), Catch::Contains("fewer than the 32 --tp ranks"));
}

TEST_CASE("the replicated plan lists every parameter of the model, with its shape", "[shard]") {
  for (bool tied : {true, false}) {
    const auto c = small_config(tied);
    const ShardPlan plan = replicated_plan(c);
    CHECK(local_parameter_count(plan) == count_parameters(c));
    LlamaForCausalLM m(c);
    const auto params = m->named_parameters();
    CHECK(params.size() == plan.size());
    for (const auto& item : params) {
      REQUIRE(plan.count(item.key()));
      CHECK(item.value().sizes() == torch::IntArrayRef(plan.at(item.key()).full_shape));
    }
  }
  // Pure: the 8B list costs nothing and matches the published count.
  CHECK(local_parameter_count(replicated_plan(preset("llama3-8b"))) == 8030261248);
}

// Row split (q_proj, dim 0), column split (o_proj, dim 1), uneven (3 pieces of 32 and
// 50), a split embedding: every shard IS the slice of the single-process parameter.
TEST_CASE("a model built from a plan holds exactly its shards, each the slice of the full init", "[shard][init]") {
  const auto c = small_config(/*tied=*/false);
  LlamaForCausalLM full(c);
  full->to(torch::kFloat64);
  init_parameters(*full, replicated_plan(c), /*seed=*/11, /*init_std=*/0.2);
  const auto full_params = full->named_parameters();
  for (int count : {2, 3}) {
    for (int index = 0; index < count; ++index) {
      ShardPlan plan = replicated_plan(c);
      plan.at("model.layers.1.self_attn.q_proj.weight").split(0, Axis::kTp, index, count);  // rows
      plan.at("model.layers.1.self_attn.o_proj.weight").split(1, Axis::kTp, index, count);  // columns
      plan.at("model.embed_tokens.weight").split(0, Axis::kTp, index, count);               // 50 rows: uneven at 3
      plan.at("lm_head.weight").split(0, Axis::kTp, index, count);
      LlamaForCausalLM part(c, plan, kF64);
      init_parameters(*part, plan, /*seed=*/11, /*init_std=*/0.2);
      int64_t numel = 0;
      for (const auto& item : part->named_parameters()) {
        const ShardRecord& r = plan.at(item.key());
        const auto& p = item.value();
        CHECK(p.scalar_type() == torch::kFloat64);  // built on the requested dtype
        CHECK(p.sizes() == torch::IntArrayRef(r.local_shape()));
        const auto expected = r.is_split() ? full_params[item.key()].narrow(r.split_dim, r.slice().offset, r.slice().length)
                                           : full_params[item.key()];
        CHECK(torch::equal(p, expected));
        numel += p.numel();
      }
      CHECK(numel == local_parameter_count(plan));
      CHECK(part->named_parameters()["model.layers.1.self_attn.o_proj.weight"].size(1) ==
            even_slice(32, index, count).length);
    }
  }
}

TEST_CASE("a plan without some layers builds only those it holds, under their global names", "[shard][model]") {
  const auto c = small_config(true);
  ShardPlan plan;
  for (auto& [name, r] : replicated_plan(c))  // a middle pipeline stage: layer 1 only
    if (name.rfind("model.layers.1.", 0) == 0) plan[name] = r;
  LlamaForCausalLM stage(c, plan);
  init_parameters(*stage, plan, 3, 0.02);
  const auto params = stage->named_parameters();
  CHECK(params.size() == 9);
  CHECK(params.contains("model.layers.1.mlp.down_proj.weight"));
  CHECK_FALSE(params.contains("model.layers.0.mlp.down_proj.weight"));
  REQUIRE(stage->model->layers->items.size() == 1);
  CHECK(stage->model->layers->items[0].first == 1);
  // It runs on hidden states it "received": [B, S, H] -> [B, S, H].
  auto x = torch::randn({2, 5, 32});
  CHECK(stage->run_layers(x).sizes() == x.sizes());
  CHECK_THROWS_WITH(stage->embed(torch::zeros({2, 5}, torch::kInt64)), Catch::Contains("holds no embedding"));
  // A record the model does not have is an error, not silently ignored.
  ShardPlan bad = plan;
  bad["model.layers.7.mlp.up_proj.weight"] = plan.at("model.layers.1.mlp.up_proj.weight");
  bad["model.layers.7.mlp.up_proj.weight"].name = "model.layers.7.mlp.up_proj.weight";
  CHECK_THROWS(LlamaForCausalLM(c, bad));
}

TEST_CASE("embed / run_layers / final_norm / logits compose to forward", "[model]") {
  LlamaForCausalLM m(small_config(false));
  m->to(torch::kFloat64);
  init_parameters(*m, 5, 0.2);
  auto tokens = torch::randint(0, 50, {2, 7}, torch::kInt64);
  torch::NoGradGuard g;
  auto split = m->logits(m->final_norm(m->run_layers(m->embed(tokens))));
  CHECK(torch::equal(split, m->forward(tokens)));
}

TEST_CASE("replace_slot swaps a projection in named_parameters (plain assignment would not)", "[model]") {
  LlamaForCausalLM m(small_config());
  auto& attn = *m->model->layers->items[0].second->self_attn;
  const auto old_weight = attn.named_parameters()["q_proj.weight"];
  // Plain assignment: the old child stays registered, the new weight is invisible.
  attn.q_proj = torch::nn::AnyModule(Linear(32, 32));
  CHECK(attn.named_parameters()["q_proj.weight"].is_same(old_weight));
  // replace_slot: the slot and the registered child agree.
  Linear fresh(32, 32);
  replace_slot(attn, "q_proj", attn.q_proj, torch::nn::AnyModule(fresh));
  CHECK(attn.named_parameters()["q_proj.weight"].is_same(fresh->weight));
  CHECK(m->named_parameters()["model.layers.0.self_attn.q_proj.weight"].is_same(fresh->weight));
  int64_t n = 0;
  for (auto& p : m->parameters()) n += p.numel();
  CHECK(n == count_parameters(small_config()));
}

TEST_CASE("attention takes its head counts from the projections (half the heads: half the output)", "[model]") {
  const auto c = small_config();
  ShardPlan plan = replicated_plan(c);
  for (auto n : {"q_proj", "k_proj", "v_proj"})  // a tensor-parallel rank's share: 2 of 4 heads, 1 of 2 kv heads
    plan.at(std::string("model.layers.0.self_attn.") + n + ".weight").split(0, Axis::kTp, 0, 2);
  plan.at("model.layers.0.self_attn.o_proj.weight").split(1, Axis::kTp, 0, 2);
  LlamaForCausalLM m(c, plan);
  init_parameters(*m, plan, 1, 0.02);
  auto& attn = *m->model->layers->items[0].second->self_attn;
  auto x = torch::randn({2, 6, 32});
  std::vector<int64_t> seen;
  attn.core = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    seen = {q.size(1), k.size(1)};
    return causal_attention(q, k, v);
  };
  const auto rope = rope_tables(c.head_dim(), c.rope_theta, torch::arange(6), torch::kFloat32, torch::kCPU);
  CHECK(attn.forward(x, rope).sizes() == x.sizes());  // o_proj's partial sum: [B, S, H]
  CHECK(seen == std::vector<int64_t>{2, 1});
}

TEST_CASE("tied head reads the weight of whatever module sits in the embedding slot", "[model]") {
  LlamaForCausalLM m(small_config(true));
  CHECK(m->head_weight().is_same(m->named_parameters()["model.embed_tokens.weight"]));
  Embedding other(50, 32);
  replace_slot(*m->model, "embed_tokens", m->model->embed_tokens, torch::nn::AnyModule(other));
  CHECK(m->head_weight().is_same(other->weight));
  CHECK(m->named_parameters()["model.embed_tokens.weight"].is_same(other->weight));
}

TEST_CASE("head and loss slots receive the final hidden states", "[model]") {
  LlamaForCausalLM m(small_config());
  init_parameters(*m, 2, 0.02);
  auto tokens = torch::randint(0, 50, {2, 5}, torch::kInt64), targets = torch::randint(0, 50, {2, 5}, torch::kInt64);
  const auto expected = m->loss(tokens, targets);
  torch::Tensor hidden_seen;
  m->loss_fn = [&](const torch::Tensor& hidden, const torch::Tensor& t) {
    hidden_seen = hidden;  // [B, S, H], after the final norm
    return torch::nn::functional::cross_entropy(m->logits(hidden).view({-1, 50}), t.reshape({-1}));
  };
  CHECK(torch::allclose(m->loss(tokens, targets), expected));
  CHECK(hidden_seen.sizes() == torch::IntArrayRef({2, 5, 32}));
  CHECK(torch::allclose(hidden_seen, m->final_norm(m->run_layers(m->embed(tokens)))));
  int head_calls = 0;
  m->head = [&](const torch::Tensor& hidden) { ++head_calls; return torch::linear(hidden, m->head_weight()); };
  m->loss(tokens, targets);
  CHECK(head_calls == 1);
}

TEST_CASE("every decoder layer runs through the layer wrappers, outermost first, with its global index", "[model]") {
  LlamaForCausalLM m(small_config());
  init_parameters(*m, 2, 0.02);
  std::vector<std::string> order;
  const auto recorder = [&](const std::string& name) {
    return LayerWrapper{name, [&, name](const LayerCall& call, const torch::Tensor& x) {
                          order.push_back(name + " " + std::to_string(call.index));
                          return call.next(x);
                        }};
  };
  m->wrap_layers(recorder("inner"));
  m->wrap_layers(recorder("outer"));  // installed last: the outermost
  auto tokens = torch::randint(0, 50, {1, 4}, torch::kInt64);
  const auto wrapped = m->forward(tokens);
  CHECK(order == std::vector<std::string>{"outer 0", "inner 0", "outer 1", "inner 1", "outer 2", "inner 2"});
  m->unwrap_layers("outer");
  m->unwrap_layers("inner");
  CHECK(m->layer_wrappers.empty());
  CHECK(torch::equal(m->forward(tokens), wrapped));  // the wrappers only watched
}

TEST_CASE("RoPE comes from a positions tensor: a chunk at its positions equals that chunk of the whole", "[model]") {
  // Two separate chunks (zigzag context parallelism gives a rank chunks 0 and 3 of 4):
  // q/k rotated at positions {0,1, 6,7} equal rows {0,1,6,7} of the full rotation.
  const auto all = rope_tables(8, 10000.0, torch::arange(8), torch::kFloat64, torch::kCPU);
  const auto pos = torch::tensor({0, 1, 6, 7}, torch::kInt64);
  const auto some = rope_tables(8, 10000.0, pos, torch::kFloat64, torch::kCPU);
  CHECK(torch::equal(some.cos, all.cos.index_select(0, pos)));
  CHECK(torch::equal(some.sin, all.sin.index_select(0, pos)));
  // The model uses the positions it is given: RoPE makes attention depend on relative
  // positions only, so {3, 4} gives what {0, 1} gives, and {0, 5} does not.
  LlamaForCausalLM m(small_config());
  m->to(torch::kFloat64);
  init_parameters(*m, 4, 0.5);
  torch::NoGradGuard g;
  auto x = torch::randn({1, 2, 32}, kF64);
  auto positions = [](int64_t a, int64_t b) { return torch::tensor({a, b}, torch::kInt64); };
  const auto at01 = m->run_layers(x, positions(0, 1));
  CHECK(torch::equal(at01, m->run_layers(x)));  // default positions: 0..S-1
  CHECK(torch::allclose(at01, m->run_layers(x, positions(3, 4)), 1e-9, 1e-12));
  CHECK_FALSE(torch::allclose(at01, m->run_layers(x, positions(0, 5)), 1e-6, 1e-9));
}

TEST_CASE("full tensors load into a model of any plan: each parameter takes its slice", "[shard][checkpoint]") {
  const auto c = small_config(false);
  LlamaForCausalLM whole(c);
  init_parameters(*whole, 8, 0.2);
  NamedTensors full;
  for (auto& item : whole->named_parameters()) full.emplace_back(item.key(), item.value().detach());
  ShardPlan plan = replicated_plan(c);
  plan.at("model.layers.2.mlp.down_proj.weight").split(1, Axis::kTp, 2, 3);  // columns, uneven (48 = 16 x 3)
  plan.at("lm_head.weight").split(0, Axis::kTp, 1, 3);                       // 50 rows: 17, 17, 16
  LlamaForCausalLM part(c, plan);
  load_parameters(*part, full, plan);
  LlamaForCausalLM reference(c, plan);
  init_parameters(*reference, plan, 8, 0.2);
  for (auto& item : part->named_parameters())
    CHECK(torch::equal(item.value(), reference->named_parameters()[item.key()]));
  CHECK_THROWS_WITH(load_parameters(*part, full), Catch::Contains("the tensor given is"));  // no plan: shapes differ
}
