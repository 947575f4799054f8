// pipeline_parallel/p2p_program.h — which sends and receives a pipeline rank posts
// together, and when: the discipline that NCCL needs, derived from the schedule.
//
// Why. NCCL has no tags, never buffers a message, and runs one communicator's operations
// in the order they were issued. A send completes only when the peer has posted the
// matching receive; the k-th send from a to b is the k-th receive b posts from a. So a
// rank blocked in a send waits for its peer, and if the peer is itself blocked in a send
// to us, both wait forever. 1F1B with P = 2, m = 2, each transfer on its own:
//
//   rank 0: F0 send(a0) F1 send(a1) ............ recv(g0) B0 ...
//   rank 1: recv(a0) F0 B0 send(g0) ............ recv(a1) F1 ...
//            rank 0 waits in send(a1) for recv(a1); rank 1 waits in send(g0) for recv(g0)
//
// The cure (Megatron's send_forward_recv_backward and its mates) is to post the two in
// one group (ncclGroupStart/End): NCCL runs a group's operations together, so
// {send a1, recv g0} on rank 0 and {send g0, recv a1} on rank 1 both complete.
//
// How the groups are chosen: in rounds. All ranks walk their schedule lists together;
// in each round every rank may run its next action, if its input was produced in an
// earlier round. A received input travels in this round: the receive goes into the
// receiver's group of the round, the matching send into the sender's group of the same
// round (the sender kept the tensor since it produced it). A rank's program is then, per
// round, [its group, if any] [its action, if any]. Every group of round k matches only
// groups of round k, and a rank reaches its round-k group after finishing rounds < k, so
// by induction no group waits forever. Messages on a channel (a -> b) go in round order
// on both sides, so one tag for every message is enough (NCCL has none). simulate_in_order() checks all this
// independently of how the programs were made.
//
// The CPU path runs the same programs over MPI with one tag for every message, so every
// CPU pipeline equivalence case also proves the order NCCL will see.
//
// Test: build/tests/unit_tests "[p2p]"
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipeline_parallel/schedules.h"

namespace picotron {

// One step of a rank's program: exchange a group of tensors with the neighbours (posted
// together, waited together), then run an action. Either part may be missing.
struct PipelineStep {
  struct Op {
    bool send = false;  // send: this rank's tensor to t.peer; receive: t.peer's tensor here
    Transfer t;         // which tensor: kind, micro-batch, the sender's virtual stage
  };
  std::vector<Op> exchange;               // sends first, then the receive
  std::optional<PipelineAction> action;  // the schedule's next action on this rank
};

// Every rank's program for one step (index = pp rank). Pure. The actions are exactly
// schedule_actions(s, P, m, v, rank), in order.
std::vector<std::vector<PipelineStep>> pipeline_programs(PipelineSchedule s, int P, int m, int v);
// The rounds over any lists (one per rank, v chunks each; each list in an order its data
// allows). Throws std::logic_error when a round runs nothing.
std::vector<std::vector<PipelineStep>> programs_for_lists(const std::vector<std::vector<PipelineAction>>& lists, int P, int v,
                                                         bool v_shape = false);
// The schedule's forwards alone, in its order: the validation loss (no backward).
std::vector<std::vector<PipelineStep>> forward_only_programs(PipelineSchedule s, int P, int m, int v);
std::string to_string(const PipelineStep& step);  // "[send a3 to 1, recv g0 from 1] B0"
// --dry-run's listing: "p2p program per step (...):" and one line per pp rank.
std::string pipeline_programs_text(PipelineSchedule s, int P, int m, int v);

// NCCL's rules, simulated: each rank runs its program in order; a group completes when
// every operation in it has met its partner (the k-th send a -> b meets the k-th receive
// at b from a, whatever the kind: one channel per pair); an action runs when it comes
// up, costing F = 1, B = 2 (B = W = 1 when `split`). Reports the first problem (a
// message received as the wrong tensor, a deadlock), the makespan and each rank's idle
// time.
struct InOrderRun {
  std::string problem;
  int64_t makespan = 0;
  std::vector<int64_t> busy, idle;
};
InOrderRun simulate_in_order(const std::vector<std::vector<PipelineStep>>& programs, bool split, bool v_shape = false);

// The naive discipline, for the tests and the handout: each transfer alone, a receive
// just before the action that needs it, a send just after the action that made it. It
// deadlocks under NCCL's rules (see the picture above).
std::vector<std::vector<PipelineStep>> one_transfer_at_a_time(PipelineSchedule s, int P, int m, int v);

}  // namespace picotron
