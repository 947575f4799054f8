// picotron/step_place.h — where in the step the running code is: the layer, the part of the
// model, the micro-batch, and whether autograd's backward is running. Whoever observes a
// communication (the ledger, --explain, the flight recorder: picotron/comm_listener.h)
// reads it from here, so no technique passes a title through its math.
//
//   forward   the model says where it is as it runs: run_layer opens "layer 3", the layer
//             opens "attention" and then "MLP", embed() opens "embedding", head_loss()
//             "head"; the training loop and the pipeline's executor open "micro-batch m".
//             Each is a PlaceScope: set on entry, the outer place back on exit.
//   backward  nothing runs the model's code any more: autograd walks the graph. So each
//             part the model opens also leaves two identity nodes in the graph, one at its
//             output and one at its input. Backward reaches the output's first: its backward
//             says "now the gradient flows through layer 3, attention"; the input's comes
//             after the part's whole backward: "back outside it".
//
//       x ──[input mark]──> attention ──[output mark]──> y          (forward, left to right)
//       dx <── sets outer ── backward of the block ── sets {3, attention} <── dy   (backward)
//
// Backward itself is told by autograd (get_current_graph_task_id: inside a backward, on any
// of its threads), so an all-reduce issued from an autograd function's backward, a
// gradient hook or recompute's re-run is "backward" wherever it was written.
//
// The place is per thread (thread_local, like autograd's own grad mode): a gradient hook or
// autograd's device thread sees the place its backward set, never another thread's.
// It is observation only: nothing in the step's arithmetic reads it.
//
// Test: build/tests/unit_tests "[place]"; ctest -R explain.narration
#pragma once

#include <cstdint>
#include <functional>

#include <torch/torch.h>

namespace picotron {

// The parts of the model a place can name (--explain prints part_name()).
enum class Part : int8_t { kNone, kEmbedding, kAttention, kMlp, kExperts, kHead };
const char* part_name(Part part);  // "", "embedding", "attention", "MLP", "experts", "head"

struct StepPlace {
  int micro_batch = -1;  // 0-based; -1: none (outside the micro-batches: gradient sync, optimizer)
  int layer = -1;        // global decoder-layer index; -1: outside the layers
  Part part = Part::kNone;
  // A pipeline message (pipeline_parallel/): the virtual stage it leaves and the one it goes to.
  int from_stage = -1, to_stage = -1;

  static StepPlace of_micro_batch(int m) { StepPlace p; p.micro_batch = m; return p; }
  static StepPlace of_layer(int64_t layer) { StepPlace p; p.layer = int(layer); return p; }
  static StepPlace of_part(Part part) { StepPlace p; p.part = part; return p; }
};

// This thread's place now.
StepPlace current_place();
// True inside autograd's backward (on whichever thread runs it).
bool in_backward();

// Sets this thread's place for its lifetime (RAII); the one before comes back at the end.
// Fields left at -1 / kNone keep the outer place's value.
class PlaceScope {
 public:
  explicit PlaceScope(StepPlace place);
  ~PlaceScope();
  PlaceScope(const PlaceScope&) = delete;
  PlaceScope& operator=(const PlaceScope&) = delete;

 private:
  StepPlace outer_;
};

// Runs part(x) inside the place `inner` (merged into the current one), and leaves the two
// marks in x's graph so that backward names the same place (see the header). Without a
// gradient to compute no mark is made (no_grad; at the input, when x needs none: the
// embedding's tokens).
torch::Tensor in_place(StepPlace inner, const torch::Tensor& x,
                       const std::function<torch::Tensor(const torch::Tensor&)>& part);

}  // namespace picotron
