// pipeline_parallel/dualpipev.h — DualPipeV: DeepSeek-V3's DualPipe (arXiv 2412.19437,
// section 3.2.1) folded onto P ranks, two model chunks per rank in a V (DualPipe's
// repository, dualpipe/dualpipev.py; torchtitan's ScheduleDualPipeV).
//
// The model is cut into 2P virtual stages. Rank r holds chunk 0 = stage r (down the V)
// and chunk 1 = stage 2P-1-r (back up), so rank 0 holds the first AND the last stage:
// the embedding, the head and the loss. At the V's bottom, rank P-1 hands stage P-1's
// output to its own stage P without a message.
//
//   stage:   0 -> 1 -> ... -> P-1 ─┐         P = 4, 8 layers:
//   rank:    0    1         P-1    │ (local)   rank 0: layers 0, 7 (+ embedding, head)
//   stage: 2P-1 <- ... <- P+1 <- P ┘           rank 3: layers 3, 4
//
// The order on rank r (m micro-batches, m >= 2P; F/B/W of chunk c; F&B: the forward of
// one micro-batch and the backward of another in one slot, the pair DualPipe overlaps so
// that one's communication hides behind the other's compute):
//
//   1. 2(P-1-r) x F0                   warm-up down the V
//   2. r+1 x (F0 F1)                   the first micro-batches turn at the bottom
//   3. P-1-r x (B1 W1 F1)              zero bubble: a W fills the wait for the next F1
//   4. m-2P+1+r x (F0&B1, F1&B0)       the steady state: every slot an F&B pair
//   5. P-1-r x (B1, F1&B0)             chunk 0 runs out of forwards
//   6. r+1 x (B1 B0)                   from the middle on, their W's wait (zero bubble)
//   7. P-1-r x (W B0)                  a waiting W before each last B0
//   8. r+1 x W                         the rest of the waiting W's
//
// Every B is followed at once by its W unless it is one that waits (steps 3, 6, 7); the
// waiting W's run in the order their B's did. A pair runs its F, then its B (and W), on
// the CPU and on a GPU alike: nothing overlaps. The overlap would need the F and the B on two
// streams (DeepSeek splits each into attention, dispatch, MLP, combine and interleaves
// them); that is not built here.
//
// Bubble (idle time per rank; DualPipe's README table, "DualPipeV" row, PP = 2P stages
// on PP/2 = P devices): (P-1)(F&B + B - 3W), B the whole backward of a chunk, W its
// weight part, F&B the time of a pair. The executor (Pipeline::run_step) runs a pair's F
// and then its B, so in this project's unit time (F = 1, B = input part 1 + W 1 = 2) a
// pair takes F + B = 3 and the formula allows (P-1)(3 + 2 - 3) = 2(P-1) units idle. The
// unit-time simulation, which runs each pair so, measures exactly P-1 idle on every rank
// against 6m busy (tests/unit/test_dualpipev.cpp): bubble (P-1)/(6m), bubble_formula's value.
// With a real overlap (F&B = max(F, B) = 2, not built here) the formula would give
// (P-1)(2 + 2 - 3) = P-1.
// The same layers under ZB-H1 (chunks twice as long) idle 2(P-1) of these units.
//
// Test: build/tests/unit_tests "[dualpipev]"
#pragma once

#include <vector>

#include "pipeline_parallel/schedules.h"

namespace picotron {

// Rank `rank`'s actions for one step, P ranks, m >= 2P micro-batches. Pure.
std::vector<PipelineAction> dualpipev_actions(int P, int m, int rank);

}  // namespace picotron
