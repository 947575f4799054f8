// pipeline_parallel/zero_bubble.h — the W pass of the zero-bubble schedule (zb-h1,
// Qi et al., arXiv 2401.10241): the backward of a linear y = x W^T is two matmuls,
//
//   dx = dy W      the previous pipeline stage waits for it: B computes it now
//   dW = dy^T x    nobody waits for it: left in a queue as a closure, W runs it later
//
// so a stage can fill its idle slots with W's. The queue holds dy and x until W runs:
// the memory ZB-H1 pays for its smaller bubble.
//
// Test: build/tests/unit_tests "[schedule]" (the deferred linear against autograd's)
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "picotron/model.h"

namespace picotron {

// The deferred weight gradients, per (micro-batch, chunk): B pushes, W runs.
class WeightGradQueue {
 public:
  void begin(int micro, int chunk) { current_ = &pending_[{micro, chunk}]; }  // a B starts: defer
  void end() { current_ = nullptr; }                                          // the B is done
  bool deferring() const { return current_ != nullptr; }
  void push(std::function<void()> work) { current_->push_back(std::move(work)); }
  void run(int micro, int chunk);  // W: every weight gradient that B left, added into .grad
  size_t waiting() const { return pending_.size(); }

 private:
  std::map<std::pair<int, int>, std::vector<std::function<void()>>> pending_;  // (micro, chunk) -> work
  std::vector<std::function<void()>>* current_ = nullptr;
};
// Replace every projection of the model by a linear whose backward, while the queue is
// deferring, leaves its weight gradient in the queue. Called for --pp-schedule zb-h1 and
// dualpipev. Throws when a projection is not a plain linear (e.g. --fp8's).
std::shared_ptr<WeightGradQueue> defer_weight_gradients(LlamaForCausalLM& model);

}  // namespace picotron
