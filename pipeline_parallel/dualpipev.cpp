// pipeline_parallel/dualpipev.cpp — see dualpipev.h for the V and the eight steps.
#include "pipeline_parallel/dualpipev.h"

#include <deque>
#include <stdexcept>

namespace picotron {

std::vector<PipelineAction> dualpipev_actions(int P, int m, int rank) {
  using A = PipelineAction;
  // BEGIN ASSIGNMENT pp.dualpipev
  const int r = rank;
  std::vector<A> out;
  int next_f[2] = {0, 0}, next_b[2] = {0, 0};  // the next micro-batch of each chunk, in order
  std::deque<A> waiting;                        // W's of the B's that let theirs wait
  auto F = [&](int chunk, bool paired = false) {
    A a{A::kForward, next_f[chunk]++, chunk};
    a.paired = paired;  // an F&B pair: the B that follows shares this slot
    out.push_back(a);
  };
  auto B = [&](int chunk, bool w_waits = false) {
    const A b{A::kBackward, next_b[chunk]++, chunk}, w{A::kWeight, b.micro, chunk};
    out.push_back(b);
    if (w_waits) waiting.push_back(w);
    else out.push_back(w);  // the whole backward now
  };
  auto W = [&] {
    out.push_back(waiting.front());
    waiting.pop_front();
  };
  for (int i = 0; i < 2 * (P - 1 - r); ++i) F(0);  // 1. warm-up down the V
  for (int i = 0; i < r + 1; ++i) F(0), F(1);        // 2. the first turn at the bottom
  for (int i = 0; i < P - 1 - r; ++i) B(1, true), W(), F(1);  // 3. B1 W1 F1
  for (int i = 0; i < m - 2 * P + 1 + r; ++i) {     // 4. the steady state: F&B pairs
    F(0, /*paired=*/!(i == 0 && r == P - 1)), B(1);  // (the V's bottom runs its first apart)
    F(1, /*paired=*/true), B(0);
  }
  for (int i = 0; i < P - 1 - r; ++i) B(1), F(1, /*paired=*/true), B(0);  // 5. B1, F1&B0
  bool w_waits = false;  // 6. B1 B0; from the middle on their W's wait
  for (int i = 0; i < r + 1; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) w_waits = true;
    B(1, w_waits);
    if (i == (r + 1) / 2 && r % 2 == 0) w_waits = true;
    B(0, w_waits);
  }
  for (int i = 0; i < P - 1 - r; ++i) W(), B(0, true);  // 7. W B0
  while (!waiting.empty()) W();                         // 8. the rest: r + 1 W's
  return out;
  // END ASSIGNMENT
}

}  // namespace picotron
