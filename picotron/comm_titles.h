// picotron/comm_titles.h — --explain's titles declared on a map of tensors, instead of
// written around its communication. A technique that moves a tensor inside an autograd
// function (tensor parallelism's f and g) says once what each direction carries:
//
//   enter = titled(enter, tp, "forward into q/k/v: the input (f)",
//                             "backward into q/k/v: the input's gradient (f)");
//
// and the observer (runtime/observe/explain.h, through Comm::note) prints the first
// title before the forward's communication and the second before the backward's. Without
// --explain (the Comm not observed) titled returns the map itself: no extra graph node,
// no string built per call.
//
// Test: ctest -R explain.narration (every title of a tp run, in order)
#pragma once

#include <functional>
#include <string>

#include <torch/torch.h>

#include "picotron/comm.h"

namespace picotron {

using TensorMap = std::function<torch::Tensor(const torch::Tensor& x)>;

// map(x) with `forward` noted on `comm` before it and `backward` noted just before map's
// backward runs (an identity node after map in the graph: its backward runs first).
// `comm` must outlive the graphs the map builds.
TensorMap titled(TensorMap map, Comm& comm, std::string forward, std::string backward);

}  // namespace picotron
