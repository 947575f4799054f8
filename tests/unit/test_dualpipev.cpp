// DualPipeV without communication (pipeline_parallel/dualpipev.h): the lists of every
// rank, simulated all at once (schedules.h) and as p2p programs under NCCL's rules
// (p2p_program.h): every F before its B before its W, inputs made before use, no
// deadlock, one channel per pair, and the idle time against DualPipe's bubble formula.
#include <catch2/catch.hpp>

#include <map>
#include <tuple>

#include "pipeline_parallel/p2p_program.h"
#include "pipeline_parallel/schedules.h"

using namespace picotron;

namespace {

constexpr auto kV = PipelineSchedule::kDualPipeV;

std::string list_text(const std::vector<PipelineAction>& actions) {
  std::string s;
  for (const auto& a : actions) s += (s.empty() ? "" : " ") + to_string(a);
  return s;
}

}  // namespace

TEST_CASE("dualpipev: the V's geometry (rank r holds stages r and 2P-1-r)", "[dualpipev]") {
  CHECK(virtual_stage(4, 0, 1, true) == 7);  // rank 0: the first and the last stage
  CHECK(virtual_stage(4, 3, 1, true) == 4);  // rank 3: the V's bottom, stages 3 and 4
  for (int vs = 0; vs < 8; ++vs) CHECK(virtual_stage(4, stage_rank(4, vs, true), vs < 4 ? 0 : 1, true) == vs);
  Transfer t;
  CHECK(sends({PipelineAction::kForward, 0, 0}, 4, 2, 3, &t, true));  // stage 3 -> 4: on rank 3 itself
  CHECK(t.peer == 3);
  CHECK(sends({PipelineAction::kForward, 0, 1}, 4, 2, 1, &t, true));  // stage 6 -> 7: rank 1 -> rank 0
  CHECK(t.peer == 0);
  CHECK(!sends({PipelineAction::kForward, 0, 1}, 4, 2, 0, &t, true));  // stage 7: the loss
}

TEST_CASE("dualpipev: the eight steps on P = 2, m = 4", "[dualpipev]") {
  // rank 0: 2 warm-up F0, one F0 F1 turn, one B1 W F1, one steady F0&B1 F1&B0, one
  // B1 F1&B0, one B1 B0 (B0's W waits), one W B0 (its W waits), one W.
  CHECK(list_text(schedule_actions(kV, 2, 4, 1, 0)) ==
        "F0 F1 F2 F0.1 B0.1 W0.1 F1.1 F3& B1.1 W1.1 F2.1& B0 W0 B2.1 W2.1 F3.1& B1 W1 B3.1 W3.1 B2 W2 B3 W3");
  // rank 1 (the V's bottom): no warm-up, two turns; its first steady F0 runs apart
  // from its B1; the last B1 B0 let their W's wait.
  CHECK(list_text(schedule_actions(kV, 2, 4, 1, 1)) ==
        "F0 F0.1 F1 F1.1 F2 B0.1 W0.1 F2.1& B0 W0 F3& B1.1 W1.1 F3.1& B1 W1 B2.1 W2.1 B2 W2 B3.1 B3 W3.1 W3");
}

TEST_CASE("dualpipev: every F before its B before its W, on every rank", "[dualpipev]") {
  for (int P : {2, 3, 4, 8})
    for (int m : {2 * P, 2 * P + 1, 3 * P, 16, 20}) {
      INFO("P=" << P << " m=" << m);
      for (int r = 0; r < P; ++r) {
        std::map<std::tuple<int, int, int>, int> at;  // (kind, micro, chunk) -> position
        const auto list = schedule_actions(kV, P, m, 1, r);
        REQUIRE(list.size() == size_t(6 * m));  // 2 chunks x m x {F, B, W}
        for (size_t i = 0; i < list.size(); ++i) at[{list[i].kind, list[i].micro, list[i].chunk}] = int(i);
        for (int c = 0; c < 2; ++c)
          for (int i = 0; i < m; ++i) {
            CHECK(at.at({PipelineAction::kForward, i, c}) < at.at({PipelineAction::kBackward, i, c}));
            CHECK(at.at({PipelineAction::kBackward, i, c}) < at.at({PipelineAction::kWeight, i, c}));
          }
        for (size_t i = 0; i < list.size(); ++i)  // a pair: an F, then a B of the other chunk
          if (list[i].paired) CHECK((i + 1 < list.size() && list[i + 1].kind == PipelineAction::kBackward &&
                                     list[i + 1].chunk != list[i].chunk));
      }
    }
}

TEST_CASE("dualpipev: dependencies across ranks, NCCL's rules, and DualPipe's bubble", "[dualpipev]") {
  for (int P : {2, 3, 4, 8})
    for (int m : {2 * P, 2 * P + 1, 3 * P, 16, 20}) {
      if (m < 2 * P) continue;
      INFO("P=" << P << " m=" << m);
      REQUIRE(schedule_problem(kV, P, m, 2, 64).empty());
      // All ranks at once, each action as soon as its input exists.
      const Simulation sim = simulate(kV, P, m, 2);
      REQUIRE(sim.problem.empty());
      // The p2p program: groups in rounds, run under NCCL's rules (no tags, no buffering).
      const auto programs = pipeline_programs(kV, P, m, 2);
      const InOrderRun run = simulate_in_order(programs, /*split=*/true, /*v_shape=*/true);
      REQUIRE(run.problem.empty());
      for (int r = 0; r < P; ++r) {
        CHECK(sim.busy[r] == 6 * m);  // 2m chunk-micro-batches x (F + B + W)
        // P-1 idle with each F&B pair run in sequence (dualpipev.h: the formula with an overlapped F&B = 2 gives the same)
        CHECK(sim.idle[r] == P - 1);
        CHECK(double(sim.idle[r]) / double(sim.busy[r]) == Approx(bubble_formula(kV, P, m, 2)).epsilon(1e-12));
        CHECK(run.idle[r] == sim.idle[r]);  // the rendezvous costs nothing here
        CHECK(sim.max_alive[r] <= 2 * P + 1);
      }
    }
}

TEST_CASE("dualpipev: its refusals and its messages", "[dualpipev]") {
  CHECK_THAT(schedule_problem(kV, 4, 7, 2, 8), Catch::Contains("needs --grad-acc-steps >= 2 x --pp"));
  CHECK_THAT(schedule_problem(kV, 4, 8, 1, 8), Catch::Contains("holds 2 chunks per rank"));
  CHECK_THAT(schedule_problem(kV, 4, 8, 2, 7), Catch::Contains("is fewer than 2 x --pp 4 (dualpipev"));
  CHECK(schedule_problem(kV, 4, 8, 2, 8).empty());
  // Each of the 2P stages but the last sends m activations, each but the first m
  // gradients; the V's bottom (stage P-1 <-> P) keeps its 2m on the rank: 2 (2P - 2) m.
  for (int P : {2, 4}) {
    int64_t total = 0;
    for (int r = 0; r < P; ++r) total += pipeline_sends_per_step(kV, P, 8, 2, r);
    CHECK(total == 2 * (2 * P - 2) * 8);
  }
  CHECK(pipeline_sends_per_step(kV, 2, 4, 2, 0) == 8);  // rank 0: a of stage 0, g of stage 3
  CHECK(pipeline_sends_per_step(kV, 2, 4, 2, 1) == 8);  // rank 1: a of stage 2, g of stage 1
}
