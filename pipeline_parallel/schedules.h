// pipeline_parallel/schedules.h — pipeline schedules as pure functions.
//
// A schedule is, for each pipeline rank, the ORDER in which it runs its micro-batches'
// forward (F) and backward (B; W for a deferred weight-gradient pass). Nothing here
// communicates or touches a tensor: the executor (pipeline_parallel.cpp) runs the list,
// and the tests (tests/unit/test_pipeline.cpp) simulate all ranks at once to prove that every
// action's input exists before it runs, that nothing deadlocks, and that the idle time
// is the schedule's bubble formula.
//
// Virtual stages. The model's layers are cut into P*v consecutive pieces ("virtual
// stages"); rank r holds v of them, its model chunks c = 0..v-1, virtual stage c*P + r
// (Megatron's round-robin). v = 1 except for the interleaved schedule. Activations flow
// from virtual stage s to s+1 (rank r to r+1, and from rank P-1 back to rank 0 between
// chunks), their gradients the other way.
//
//   P = 2, v = 2, 8 layers:   rank 0: chunk 0 = layers 0-1 (vs 0), chunk 1 = layers 4-5 (vs 2)
//                             rank 1: chunk 0 = layers 2-3 (vs 1), chunk 1 = layers 6-7 (vs 3)
//
// The schedules (m micro-batches per step; unit times F = 1, B = 2 (input + weight
// gradients) or B = W = 1 when split). Bubble = idle time / busy time per rank:
//
//   afab         all m forwards, then all m backwards (GPipe).        bubble (P-1)/m,
//                m micro-batches' activations alive at once
//   1f1b         rank r: P-1-r warm-up forwards, then one forward one backward, then the
//                remaining backwards. Same bubble (P-1)/m, at most P alive.
//   interleaved  1f1b over the v chunks (Megatron's order: groups of P micro-batches
//                go through chunk 0, then chunk 1, ...). Bubble (P-1)/(v m); m % P == 0.
//   zb-h1        1f1b with B split into B (input gradient: the critical path) and W
//                (weight gradient). Rank r lets up to r W's wait, and they fill the
//                cool-down bubble. Bubble (P-1)/(3m) (the Zero Bubble paper's
//                (P-1)(F+B-W) with F = B = W), at most P alive (as 1f1b); m >= P.
//   dualpipev    two chunks per rank in a V (rank r: stages r and 2P-1-r), F&B pairs in
//                the steady state, zero-bubble W's at the ends (dualpipev.h). Bubble
//                (P-1)/(6m) in chunk units (DualPipe's (P-1)(F&B+B-3W)); m >= 2P.
//
// Test: build/tests/unit_tests "[schedule]"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace picotron {

enum class PipelineSchedule { kAfab, k1F1B, kInterleaved, kZbH1, kDualPipeV };
const char* schedule_name(PipelineSchedule s);  // "afab", "1f1b", "interleaved", "zb-h1", "dualpipev"
// DualPipeV's V: chunk 1 of rank r is stage 2P-1-r, not the round-robin P + r.
inline bool is_v_shape(PipelineSchedule s) { return s == PipelineSchedule::kDualPipeV; }
// Model chunks per rank: --pp-virtual-stages v for interleaved, 2 for dualpipev, else 1.
inline int schedule_chunks(PipelineSchedule s, int v) {
  return s == PipelineSchedule::kInterleaved ? v : s == PipelineSchedule::kDualPipeV ? 2 : 1;
}
// Whether backward is split into B (input gradient) and W (weight gradient).
inline bool splits_backward(PipelineSchedule s) { return s == PipelineSchedule::kZbH1 || s == PipelineSchedule::kDualPipeV; }
// Throws std::invalid_argument naming --pp-schedule and the choices.
PipelineSchedule parse_schedule(const std::string& name);

struct PipelineAction {
  enum Kind { kForward, kBackward, kWeight } kind;  // kBackward: input+weight grads, or
                                                    // input grads only when W's follow
  int micro = 0;  // micro-batch 0..m-1
  int chunk = 0;  // model chunk 0..v-1 on this rank
  bool paired = false;  // dualpipev: an F whose slot it shares with the B that follows (F&B)
  bool operator==(const PipelineAction& o) const { return kind == o.kind && micro == o.micro && chunk == o.chunk; }
};
std::string to_string(const PipelineAction& a);  // "F3", "B0.1" (chunk 1), "W2", "F3&" (paired)
// --explain's heading of an action of virtual stage `stage`, named as --dry-run's program
// names it, 0-based: "F3& forward of micro-batch 3 on stage 0, one slot with the B that
// follows (an overlapped F&B pair)". `split`: B is the input gradient only (a W follows).
std::string action_title(const PipelineAction& a, int stage, bool split);

// This rank's actions for one optimizer step, in order. P pipeline ranks, m micro-
// batches, v chunks per rank (1 unless interleaved), rank 0..P-1.
std::vector<PipelineAction> schedule_actions(PipelineSchedule s, int P, int m, int v, int rank);

// Problems with (schedule, P, m, v) as one line naming the flags; empty when fine.
std::string schedule_problem(PipelineSchedule s, int P, int m, int v, int64_t layers);

// ---- the pipeline's geometry ---------------------------------------------------------
// Round-robin (v_shape false): chunk c of rank r is virtual stage c P + r. The V
// (dualpipev, v = 2): chunk 0 is stage r, chunk 1 stage 2P-1-r.
inline int virtual_stage(int P, int rank, int chunk, bool v_shape = false) {
  return v_shape && chunk == 1 ? 2 * P - 1 - rank : chunk * P + rank;
}
inline int stage_rank(int P, int vs, bool v_shape = false) { return v_shape && vs >= P ? 2 * P - 1 - vs : vs % P; }
// Layers [first, first + count) of virtual stage vs out of P*v (even split, the first
// L % (P*v) stages one layer longer).
struct LayerRange {
  int64_t first = 0, count = 0;
};
LayerRange stage_layers(int64_t layers, int P, int v, int vs);

// The tensors an action receives before it runs, or sends after: activations
// [B, S, H] forward (F of virtual stage vs > 0 receives, vs < P*v-1 sends) and their
// gradients backward (B of vs < P*v-1 receives, vs > 0 sends). `peer` is a pp group
// rank. `tag()` names the kind (0 activation, 1 gradient) for the simulators, which
// match each sender's list with its receiver's per kind (schedules.cpp); the executor
// sends every message with one tag and relies on the p2p program's order instead
// (p2p_program.h). In the V, stage P-1 -> P stays on rank P-1: peer == rank, no message
// (the executor hands the tensor from its outbox to itself).
struct Transfer {
  enum Kind { kActivation = 0, kGradient = 1 } kind;
  int micro = 0;
  int from_stage = 0;  // the sender's virtual stage
  int peer = 0;        // the other rank
  int tag() const { return int(kind); }
};
bool receives(const PipelineAction& a, int P, int v, int rank, Transfer* t, bool v_shape = false);
bool sends(const PipelineAction& a, int P, int v, int rank, Transfer* t, bool v_shape = false);

// Tensors this rank sends per step: every F not on the last virtual stage and every B
// not on the first sends one [B, S, H] tensor. Whole pipeline: 2 (P v - 1) m tensors;
// dualpipev: 2 (2P - 2) m (the V's bottom sends nothing).
int64_t pipeline_sends_per_step(PipelineSchedule s, int P, int m, int v, int rank);

// ---- simulation: all ranks at once, in unit time -------------------------------------
// Each rank runs its list in order; an action starts when the rank is free and its
// input has been produced (a send is posted the moment its tensor exists; a receive
// waits for it: the executor's rules). Costs: F = 1, B = 2, or B = W = 1 when W's exist.
struct Simulation {
  std::string problem;                // empty, or what went wrong (deadlock, a missing
                                      // or duplicated action, a message mismatch)
  int64_t makespan = 0;               // when the last rank finishes
  std::vector<int64_t> busy, idle;    // per rank: time computing, makespan - busy
  std::vector<int> max_alive;         // per rank: most micro-batches whose activations
                                      // are held at once (forward done, backward not)
  struct Slot {
    PipelineAction action;
    int64_t start = 0, cost = 0;      // in units (F = 1, ...)
  };
  std::vector<std::vector<Slot>> timeline;  // per rank: each action when it ran (the
                                            // picture: --dry-run --pp-trace, pipeline_trace.cpp)
};
Simulation simulate(PipelineSchedule s, int P, int m, int v);
// The same for any lists (one per rank; `split`: backward is B + W), e.g. a broken one.
Simulation simulate_lists(const std::vector<std::vector<PipelineAction>>& lists, int P, int m, int v, bool split,
                          bool v_shape = false);

// The bubble formula of the schedule: idle / busy per rank.
double bubble_formula(PipelineSchedule s, int P, int m, int v);
std::string bubble_formula_text(PipelineSchedule s);  // "(P-1)/m", ...

}  // namespace picotron
