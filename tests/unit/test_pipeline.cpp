// Pipeline parallelism without communication: the schedules are pure functions, so every
// rank's list is checked by simulating all ranks at once (schedules.h), and the stage
// split is pure arithmetic on the plan, and the zero-bubble linear is checked against
// autograd's on one process.
#include <catch2/catch.hpp>

#include "kernels/fp8.h"
#include "picotron/model.h"
#include "picotron/shard.h"
#include "pipeline_parallel/pipeline_parallel.h"
#include "pipeline_parallel/schedules.h"
#include "runtime/observe/projections.h"

using namespace picotron;

namespace {

const PipelineSchedule kAll[] = {PipelineSchedule::kAfab, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved,
                                 PipelineSchedule::kZbH1};

std::string list_text(const std::vector<PipelineAction>& actions) {
  std::string s;
  for (const auto& a : actions) s += (s.empty() ? "" : " ") + to_string(a);
  return s;
}

}  // namespace

TEST_CASE("1f1b: warm-up forwards, one forward one backward, cool-down", "[schedule]") {
  // P = 4, m = 6: rank 0 runs 3 forwards ahead, the last rank none.
  CHECK(list_text(schedule_actions(PipelineSchedule::k1F1B, 4, 6, 1, 0)) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(list_text(schedule_actions(PipelineSchedule::k1F1B, 4, 6, 1, 3)) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  CHECK(list_text(schedule_actions(PipelineSchedule::kAfab, 2, 3, 1, 1)) == "F0 F1 F2 B0 B1 B2");
}

TEST_CASE("zb-h1: rank r lets up to r weight passes wait, and runs them at the end", "[schedule]") {
  CHECK(list_text(schedule_actions(PipelineSchedule::kZbH1, 3, 4, 1, 0)) == "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3");
  CHECK(list_text(schedule_actions(PipelineSchedule::kZbH1, 3, 4, 1, 2)) == "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
}

TEST_CASE("interleaved: groups of P micro-batches through chunk 0, then chunk 1", "[schedule]") {
  // P = 2, v = 2, m = 4, rank 1: warm-up 2 (P-1-r) + (v-1) P = 2 forwards.
  CHECK(list_text(schedule_actions(PipelineSchedule::kInterleaved, 2, 4, 2, 1)) ==
        "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
}

TEST_CASE("every schedule: inputs exist before use, no deadlock, messages match, bubble = formula", "[schedule]") {
  for (auto s : kAll)
    for (int P : {2, 3, 4, 8})
      for (int m : {1, P - 1, P, 2 * P, 12, 16}) {  // (m < P: afab and 1f1b only)
        const int v = s == PipelineSchedule::kInterleaved ? (P == 8 ? 3 : 2) : 1;
        if (!schedule_problem(s, P, m, v, 64).empty()) continue;
        INFO(schedule_name(s) << " P=" << P << " m=" << m << " v=" << v);
        const Simulation sim = simulate(s, P, m, v);
        REQUIRE(sim.problem.empty());
        for (int r = 0; r < P; ++r) {
          // idle / busy is the bubble formula, on every rank (exact in unit time)
          CHECK(double(sim.idle[r]) / double(sim.busy[r]) == Approx(bubble_formula(s, P, m, v)).epsilon(1e-12));
          if (s == PipelineSchedule::kAfab) CHECK(sim.max_alive[r] == m);                     // everything at once
          if (s == PipelineSchedule::k1F1B || s == PipelineSchedule::kZbH1) CHECK(sim.max_alive[r] <= P);
          if (s == PipelineSchedule::k1F1B) CHECK(sim.max_alive[r] == std::min(P - r, m));  // rank r: P - r
        }
      }
}

TEST_CASE("the simulator rejects lists that cannot run", "[schedule]") {
  // A test of the test: if these passed, "no problem" above would prove nothing.
  using A = PipelineAction;
  auto lists = [](int P, int m) {
    std::vector<std::vector<A>> l;
    for (int r = 0; r < P; ++r) l.push_back(schedule_actions(PipelineSchedule::k1F1B, P, m, 1, r));
    return l;
  };
  auto l = lists(2, 2);
  std::swap(l[1][0], l[1][1]);  // rank 1: B0 before F0
  CHECK_THAT(simulate_lists(l, 2, 2, 1, false).problem, Catch::Contains("deadlock: rank 0 waits forever before B0"));
  l = lists(2, 2);
  l[0][1] = l[0][0];  // rank 0 runs F0 twice
  CHECK_THAT(simulate_lists(l, 2, 2, 1, false).problem, Catch::Contains("runs F0 twice"));
  l = lists(2, 2);
  std::swap(l[0][0], l[0][1]);  // rank 0 sends F1 before F0: rank 1 would take it for F0
  CHECK_THAT(simulate_lists(l, 2, 2, 1, false).problem, Catch::Contains("do not match the sends in order"));
  // 1f1b with fewer micro-batches than ranks: warm-up is capped at m, idle (P-1)(F+B).
  const Simulation few = simulate(PipelineSchedule::k1F1B, 4, 2, 1);
  CHECK(few.problem.empty());
  CHECK(few.idle[0] == 9);
}

TEST_CASE("sends per rank add up to 2 (P v - 1) m for the pipeline", "[schedule]") {
  for (auto s : kAll)
    for (int P : {2, 4}) {
      const int m = 8, v = s == PipelineSchedule::kInterleaved ? 2 : 1;
      int64_t total = 0;
      for (int r = 0; r < P; ++r) total += pipeline_sends_per_step(s, P, m, v, r);
      CHECK(total == 2 * (P * v - 1) * m);
    }
  CHECK(pipeline_sends_per_step(PipelineSchedule::k1F1B, 4, 8, 1, 0) == 8);   // first: activations only
  CHECK(pipeline_sends_per_step(PipelineSchedule::k1F1B, 4, 8, 1, 1) == 16);  // middle: both
  CHECK(pipeline_sends_per_step(PipelineSchedule::k1F1B, 4, 8, 1, 3) == 8);   // last: gradients only
}

TEST_CASE("schedule constraints are one line naming the flags", "[schedule]") {
  CHECK(schedule_problem(PipelineSchedule::kInterleaved, 2, 3, 2, 8).find("--grad-acc-steps divisible by --pp") !=
        std::string::npos);
  CHECK(schedule_problem(PipelineSchedule::kInterleaved, 2, 4, 1, 8).find("--pp-virtual-stages >= 2") !=
        std::string::npos);
  CHECK(schedule_problem(PipelineSchedule::k1F1B, 2, 4, 2, 8).find("needs --pp-schedule interleaved") !=
        std::string::npos);
  CHECK(schedule_problem(PipelineSchedule::k1F1B, 4, 4, 1, 3).find("--num-hidden-layers 3 is fewer") !=
        std::string::npos);
  CHECK(schedule_problem(PipelineSchedule::kZbH1, 4, 3, 1, 4).find("needs --grad-acc-steps >= --pp") != std::string::npos);
  CHECK(schedule_problem(PipelineSchedule::kZbH1, 4, 4, 1, 4).empty());
  CHECK(schedule_problem(PipelineSchedule::k1F1B, 4, 1, 1, 4).empty());  // fewer micro-batches than ranks: fine
  CHECK_THROWS_WITH(parse_schedule("gpipe"), Catch::Contains("--pp-schedule must be afab, 1f1b, interleaved, zb-h1 or dualpipev"));
}

TEST_CASE("stage split: layers as even as possible, embedding first, norm and head last", "[schedule]") {
  // 5 layers over 2 stages: 0-2, 3-4; over 2 x 2 virtual stages: 2, 1, 1, 1.
  CHECK(stage_layers(5, 2, 1, 0).first == 0);
  CHECK(stage_layers(5, 2, 1, 0).count == 3);
  CHECK(stage_layers(5, 2, 1, 1).first == 3);
  CHECK(stage_layers(5, 2, 1, 1).count == 2);
  CHECK(stage_layers(5, 2, 2, 3).first == 4);
  CHECK(stage_layers(5, 2, 2, 3).count == 1);

  LlamaConfig c;
  c.num_hidden_layers = 5;
  for (bool tied : {true, false}) {
    c.tie_word_embeddings = tied;
    ShardPlan first = replicated_plan(c), last = replicated_plan(c);
    keep_pipeline_stage(first, c, 0, 2, 1);
    keep_pipeline_stage(last, c, 1, 2, 1);
    CHECK(first.count("model.embed_tokens.weight") == 1);
    CHECK(first.count("model.layers.2.mlp.up_proj.weight") == 1);
    CHECK(first.count("model.layers.3.mlp.up_proj.weight") == 0);
    CHECK(first.count("model.norm.weight") == 0);
    CHECK(last.count("model.layers.3.mlp.up_proj.weight") == 1);
    CHECK(last.at("model.norm.weight").stage == 1);
    // Tied: the last stage holds a copy of the embedding that stage 0 owns (counted once).
    CHECK(last.count("model.embed_tokens.weight") == (tied ? 1u : 0u));
    if (tied) CHECK_FALSE(last.at("model.embed_tokens.weight").counts_once(MeshCoords{0, 1, 0, 0}));
    CHECK(last.count("lm_head.weight") == (tied ? 0u : 1u));
    // Together the stages hold every parameter once (the tied copy aside).
    int64_t held = 0;
    for (int stage : {0, 1})
      for (const auto& [name, r] : stage == 0 ? first : last) held += r.counts_once(MeshCoords{0, stage, 0, 0}) ? 1 : 0;
    CHECK(held == int64_t(replicated_plan(c).size()));
  }
}

TEST_CASE("the interleaved split gives each rank every P-th chunk", "[schedule]") {
  LlamaConfig c;
  c.num_hidden_layers = 8;
  ShardPlan plan = replicated_plan(c);
  keep_pipeline_stage(plan, c, 1, 2, 2);  // rank 1: virtual stages 1 (layers 2-3) and 3 (layers 6-7)
  for (int layer = 0; layer < 8; ++layer)
    CHECK(plan.count("model.layers." + std::to_string(layer) + ".input_layernorm.weight") ==
          ((layer / 2) % 2 == 1 ? 1u : 0u));
}

TEST_CASE("zero bubble: B leaves the projections' weight gradients to W, which adds autograd's", "[schedule]") {
  torch::manual_seed(0);
  LlamaConfig c;
  c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 1, c.vocab_size = 20;
  c.num_attention_heads = 2, c.num_key_value_heads = 1;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  LlamaForCausalLM plain(c, replicated_plan(c), opts), deferred(c, replicated_plan(c), opts);
  {
    torch::NoGradGuard no_grad;
    auto from = plain->named_parameters();
    for (auto& item : from) item.value().normal_(0, 0.1);
    for (auto& item : deferred->named_parameters()) item.value().copy_(from[item.key()]);
  }
  auto queue = defer_weight_gradients(deferred);
  CHECK(deferred->named_parameters().size() == plain->named_parameters().size());  // same names, same tensors
  auto tokens = torch::randint(20, {2, 5}), targets = torch::randint(20, {2, 5});
  plain->loss(tokens, targets).backward();

  queue->begin(0, 0);  // B: input gradients (and the norms', embedding's), no projection dW
  deferred->loss(tokens, targets).backward();
  queue->end();
  const std::string q = "model.layers.0.self_attn.q_proj.weight", norm = "model.layers.0.input_layernorm.weight";
  CHECK_FALSE(deferred->named_parameters()[q].grad().defined());
  CHECK(deferred->named_parameters()[norm].grad().defined());
  CHECK(queue->waiting() == 1);
  queue->run(0, 0);  // W
  CHECK(queue->waiting() == 0);
  auto want = plain->named_parameters();
  for (auto& item : deferred->named_parameters()) {
    INFO(item.key());
    REQUIRE(item.value().grad().defined());
    CHECK(torch::allclose(item.value().grad(), want[item.key()].grad(), 1e-12, 1e-14));
  }
  CHECK_THROWS_WITH(queue->run(1, 0), Catch::Contains("W1 of chunk 0 before its B"));
}

TEST_CASE("zero bubble: a projection that is not a plain linear is refused, not replaced", "[schedule]") {
  // --fp8 puts an fp8 linear in each projection slot; deferring its dW would put a plain
  // linear back and run the projection unquantised while the run says fp8.
  LlamaConfig c;
  c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 1, c.vocab_size = 20;
  c.num_attention_heads = 2, c.num_key_value_heads = 1;
  LlamaForCausalLM model(c, replicated_plan(c), torch::TensorOptions().dtype(torch::kFloat64));
  fp8::apply_fp8(model, {});
  CHECK_THROWS_WITH(defer_weight_gradients(model), Catch::Contains("not a plain linear: its dW cannot be deferred"));
}

TEST_CASE("projections: what each slot became, read from the model", "[projections]") {
  LlamaConfig c;
  c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 2, c.vocab_size = 20;
  c.num_attention_heads = 2, c.num_key_value_heads = 2;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  ShardPlan plan = replicated_plan(c);
  plan.at("model.layers.0.self_attn.q_proj.weight").split(0, Axis::kTp, 0, 2);
  plan.at("model.layers.0.self_attn.o_proj.weight").split(1, Axis::kTp, 0, 2);
  LlamaForCausalLM fp8_model(c, plan, opts), deferred(c, replicated_plan(c), opts);
  fp8::apply_fp8(fp8_model, {});
  const auto kinds = projection_kinds(*fp8_model, plan);
  REQUIRE(kinds.size() == 14);  // 2 layers x 7 projections
  for (const auto& k : kinds) CHECK(k.module == "fp8 linear");
  CHECK(kinds[0].slot == "q_proj");
  CHECK(kinds[0].split == "column-parallel over tp (2 slices)");
  CHECK(kinds[3].split == "row-parallel over tp (2 slices)");
  CHECK(kinds[1].split == "whole");
  CHECK(projections_problem(kinds, /*fp8=*/true).empty());
  CHECK_THAT(projections_problem(kinds, /*fp8=*/false), Catch::Contains("layer 0 q_proj is a fp8 linear, though --fp8 was not given"));
  // zb-h1's deferral over a plain model: the slots say so, and --fp8 would be refused.
  defer_weight_gradients(deferred);
  const auto plain = projection_kinds(*deferred, replicated_plan(c));
  CHECK(plain[0].module == "linear, dW deferred to W (zero bubble)");
  CHECK_THAT(projections_problem(plain, /*fp8=*/true), Catch::Contains("though --fp8 asks for an fp8 linear"));
  CHECK_THAT(projections_text(kinds), Catch::Contains("q_proj: fp8 linear, column-parallel over tp (2 slices)"));
}
