// The pipeline's point-to-point program under NCCL's rules (pipeline_parallel/p2p_program.h),
// without communication: every schedule's program is simulated in order on all ranks,
// and the naive discipline is shown to deadlock (a test of the simulator).
#include <catch2/catch.hpp>

#include "pipeline_parallel/p2p_program.h"

using namespace picotron;

namespace {

const PipelineSchedule kAll[] = {PipelineSchedule::kAfab, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved,
                                 PipelineSchedule::kZbH1};

std::string program_text(const std::vector<PipelineStep>& program) {
  std::string s;
  for (const auto& step : program) s += (s.empty() ? "" : " ") + to_string(step);
  return s;
}

}  // namespace

TEST_CASE("1f1b's program pairs a send with the receive Megatron pairs it with", "[p2p]") {
  const auto programs = pipeline_programs(PipelineSchedule::k1F1B, 2, 3, 1);
  // Rank 0 sends a1 and receives g0 in one group (send_forward_recv_backward); rank 1
  // sends g0 and receives a1 in one group (send_backward_recv_forward).
  CHECK(program_text(programs[0]) ==
        "F0 [send a0 to 1] F1 [send a1 to 1, recv g0 from 1] B0 F2 [send a2 to 1, recv g1 from 1] B1 [recv g2 from 1] B2");
  CHECK(program_text(programs[1]) ==
        "[recv a0 from 0] F0 B0 [send g0 to 0, recv a1 from 0] F1 B1 [send g1 to 0, recv a2 from 0] F2 B2 [send g2 to 0]");
}

TEST_CASE("every schedule's program runs under NCCL's rules: no deadlock, one channel per pair", "[p2p]") {
  for (auto s : kAll)
    for (int P : {2, 3, 4, 8})
      for (int m : {1, P - 1, P, 2 * P, 12, 16}) {
        const int v = s == PipelineSchedule::kInterleaved ? (P == 8 ? 3 : 2) : 1;
        if (!schedule_problem(s, P, m, v, 64).empty()) continue;
        INFO(schedule_name(s) << " P=" << P << " m=" << m << " v=" << v);
        const auto programs = pipeline_programs(s, P, m, v);
        const InOrderRun run = simulate_in_order(programs, s == PipelineSchedule::kZbH1);
        REQUIRE(run.problem.empty());
        for (int r = 0; r < P; ++r) {
          // The actions are the schedule's, in its order: only the transfers were placed.
          std::string actions, expected;
          for (const auto& step : programs[r])
            if (step.action) actions += to_string(*step.action) + " ";
          for (const auto& a : schedule_actions(s, P, m, v, r)) expected += to_string(a) + " ";
          CHECK(actions == expected);
          // Idle time: the schedule's bubble for afab, 1f1b and zb-h1 (nothing lost to
          // the rendezvous); interleaved loses some (a sender waits for its receiver).
          const double bubble = double(run.idle[r]) / double(run.busy[r]);
          if (s == PipelineSchedule::kInterleaved) CHECK(bubble >= bubble_formula(s, P, m, v) - 1e-12);
          else CHECK(bubble == Approx(bubble_formula(s, P, m, v)).epsilon(1e-12));
        }
      }
}

TEST_CASE("the in-order simulator catches what NCCL would hang or garble on", "[p2p]") {
  // A test of the test. Each transfer on its own, in action order: 1f1b P = 2, m = 2
  // deadlocks (rank 0 in send a1, rank 1 in send g0), as p2p_program.h draws it.
  CHECK_THAT(simulate_in_order(one_transfer_at_a_time(PipelineSchedule::k1F1B, 2, 2, 1), false).problem,
             Catch::Contains("deadlock"));
  // afab with one micro-batch has nothing to cross: the naive program runs.
  CHECK(simulate_in_order(one_transfer_at_a_time(PipelineSchedule::kAfab, 2, 1, 1), false).problem.empty());

  // 1f1b P = 2, m = 3. Rank 0: F0 | [s a0] F1 | [s a1, r g0] B0 | F2 | [s a2, r g1] B1 | [r g2] B2
  //                  rank 1: [r a0] F0 | B0 | [s g0, r a1] F1 | B1 | [s g1, r a2] F2 | B2 | [s g2]
  const auto programs = pipeline_programs(PipelineSchedule::k1F1B, 2, 3, 1);
  auto swapped = programs;  // rank 0 sends a1 in a0's place, before F1 has made it
  std::swap(swapped[0][1].exchange[0].t.micro, swapped[0][2].exchange[0].t.micro);
  CHECK_THAT(simulate_in_order(swapped, false).problem, Catch::Contains("rank 0 sends [send a1 to 1] F1 before making it"));
  auto early = programs;  // rank 1 runs F1 before receiving a1
  std::swap(early[1][2].exchange, early[1][3].exchange);
  CHECK_THAT(simulate_in_order(early, false).problem, Catch::Contains("rank 1 runs F1 before its input arrives"));
  // Two activations sent in one order and received in the other: one channel, no tags,
  // so rank 1 would take a1 for a0.
  using A = PipelineAction;
  const Transfer a0{Transfer::kActivation, 0, 0, 1}, a1{Transfer::kActivation, 1, 0, 1};
  Transfer from0_a0 = a0, from0_a1 = a1;
  from0_a0.peer = from0_a1.peer = 0;
  const std::vector<std::vector<PipelineStep>> crossed = {
      {{{}, A{A::kForward, 0, 0}}, {{}, A{A::kForward, 1, 0}}, {{{true, a1}, {true, a0}}, std::nullopt}},
      {{{{false, from0_a0}}, A{A::kForward, 0, 0}}, {{{false, from0_a1}}, A{A::kForward, 1, 0}}}};
  CHECK_THAT(simulate_in_order(crossed, false).problem,
             Catch::Contains("message 0 from rank 0 to rank 1 is not received as the tensor sent"));
}
