// pipeline_parallel/schedules.cpp — see schedules.h for the five schedules and their bubbles.
#include "pipeline_parallel/schedules.h"

#include "pipeline_parallel/dualpipev.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace picotron {

const char* schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kAfab: return "afab";
    case PipelineSchedule::k1F1B: return "1f1b";
    case PipelineSchedule::kInterleaved: return "interleaved";
    case PipelineSchedule::kZbH1: return "zb-h1";
    case PipelineSchedule::kDualPipeV: return "dualpipev";
  }
  return "?";
}

PipelineSchedule parse_schedule(const std::string& name) {
  for (auto s : {PipelineSchedule::kAfab, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved,
                 PipelineSchedule::kZbH1, PipelineSchedule::kDualPipeV})
    if (name == schedule_name(s)) return s;
  throw std::invalid_argument("--pp-schedule must be afab, 1f1b, interleaved, zb-h1 or dualpipev, got '" + name + "'");
}

std::string to_string(const PipelineAction& a) {
  const char* k = a.kind == PipelineAction::kForward ? "F" : a.kind == PipelineAction::kBackward ? "B" : "W";
  return k + std::to_string(a.micro) + (a.chunk > 0 ? "." + std::to_string(a.chunk) : "") + (a.paired ? "&" : "");
}

std::string action_title(const PipelineAction& a, int stage, bool split) {
  const std::string on = " of micro-batch " + std::to_string(a.micro) + " on stage " + std::to_string(stage);
  switch (a.kind) {
    case PipelineAction::kForward:
      return to_string(a) + " forward" + on + (a.paired ? ", one slot with the B that follows (an overlapped F&B pair)" : "");
    case PipelineAction::kBackward:
      return to_string(a) + " backward" + on + (split ? ": the input's gradient (its W: the weights')" : "");
    case PipelineAction::kWeight: return to_string(a) + " weight gradients" + on;
  }
  return to_string(a);
}

namespace {

using A = PipelineAction;

// 1F1B's shape over a list of forwards and the matching list of backwards: `warmup`
// forwards, then alternate one forward and one backward, then the remaining backwards.
// `deferred_w` > 0 splits each backward into B and W, letting up to that many W's wait
// (zero bubble H1); the waiting W's run at the end.
std::vector<A> one_forward_one_backward(const std::vector<A>& fwd, const std::vector<A>& bwd, int warmup,
                                        int deferred_w, bool split_backward) {
  // BEGIN ASSIGNMENT pp.one_f_one_b
  std::vector<A> out;
  size_t f = 0, b = 0, w = 0;
  auto backward = [&] {
    out.push_back(bwd[b++]);
    if (!split_backward) return;
    if (int(b - w) > deferred_w) {
      out.push_back({A::kWeight, bwd[w].micro, bwd[w].chunk});
      ++w;
    }
  };
  for (; f < size_t(warmup) && f < fwd.size(); ++f) out.push_back(fwd[f]);
  while (f < fwd.size()) {
    out.push_back(fwd[f++]);
    backward();
  }
  while (b < bwd.size()) backward();
  for (; split_backward && w < bwd.size(); ++w) out.push_back({A::kWeight, bwd[w].micro, bwd[w].chunk});
  return out;
  // END ASSIGNMENT
}

}  // namespace

std::vector<PipelineAction> schedule_actions(PipelineSchedule s, int P, int m, int v, int rank) {
  if (s == PipelineSchedule::kDualPipeV) return dualpipev_actions(P, m, rank);
  if (s != PipelineSchedule::kInterleaved) v = 1;
  std::vector<A> fwd, bwd;
  if (s == PipelineSchedule::kInterleaved) {
    // Megatron's order: micro-batches in groups of P; each group runs chunk 0, then
    // chunk 1, ... forward, and the chunks in reverse backward.
    for (int k = 0; k < m * v; ++k) {
      const int group = k / (P * v), within = k % (P * v);
      const int micro = group * P + within % P, chunk = within / P;
      fwd.push_back({A::kForward, micro, chunk});
      bwd.push_back({A::kBackward, micro, v - 1 - chunk});
    }
  } else {
    for (int i = 0; i < m; ++i) {
      fwd.push_back({A::kForward, i, 0});
      bwd.push_back({A::kBackward, i, 0});
    }
  }
  switch (s) {
    case PipelineSchedule::kAfab: {
      std::vector<A> out = fwd;
      out.insert(out.end(), bwd.begin(), bwd.end());
      return out;
    }
    case PipelineSchedule::k1F1B: return one_forward_one_backward(fwd, bwd, P - 1 - rank, 0, false);
    case PipelineSchedule::kInterleaved:
      // Rank r runs ahead by 2 (P-1-r) chunk-forwards plus one whole round of the other
      // chunks, (v-1) P, before its first backward (Megatron's warm-up).
      return one_forward_one_backward(fwd, bwd, std::min(2 * (P - 1 - rank) + (v - 1) * P, m * v), 0, false);
    case PipelineSchedule::kZbH1: return one_forward_one_backward(fwd, bwd, P - 1 - rank, rank, true);
    case PipelineSchedule::kDualPipeV: break;  // above
  }
  return {};
}

std::string schedule_problem(PipelineSchedule s, int P, int m, int v, int64_t layers) {
  const std::string flags = "--pp " + std::to_string(P) + " --pp-schedule " + schedule_name(s);
  if (s == PipelineSchedule::kInterleaved) {
    if (v < 2) return flags + " needs --pp-virtual-stages >= 2, got " + std::to_string(v);
    if (m % P != 0)
      return flags + " needs --grad-acc-steps divisible by --pp (micro-batches go through the chunks in groups of P), got " +
             std::to_string(m);
  } else if (s == PipelineSchedule::kDualPipeV) {
    if (v != 2) return flags + " holds 2 chunks per rank (the V): leave --pp-virtual-stages out or make it 2, got " + std::to_string(v);
    if (m < 2 * P)  // step 4's count m - 2P + 1 + r is at least 1 on every rank
      return flags + " needs --grad-acc-steps >= 2 x --pp (the V fills with 2P micro-batches), got " + std::to_string(m);
  } else if (v != 1) {
    return "--pp-virtual-stages " + std::to_string(v) + " needs --pp-schedule interleaved, got " + schedule_name(s);
  }
  if (s == PipelineSchedule::kZbH1 && m < P)  // the deferred W's fill the cool-down only when m >= P
    return flags + " needs --grad-acc-steps >= --pp (the W passes fill the bubbles of m >= P micro-batches), got " +
           std::to_string(m);
  if (layers < int64_t(P) * v && is_v_shape(s))
    return "--num-hidden-layers " + std::to_string(layers) + " is fewer than 2 x --pp " + std::to_string(P) +
           " (dualpipev: two stages per rank, every stage needs at least one layer)";
  if (layers < int64_t(P) * v)
    return "--num-hidden-layers " + std::to_string(layers) + " is fewer than --pp " + std::to_string(P) +
           " x --pp-virtual-stages " + std::to_string(v) + " (every stage needs at least one layer)";
  return "";
}

LayerRange stage_layers(int64_t layers, int P, int v, int vs) {
  const int64_t n = int64_t(P) * v, base = layers / n, extra = layers % n;
  return {vs * base + std::min<int64_t>(vs, extra), base + (vs < extra ? 1 : 0)};
}

bool receives(const PipelineAction& a, int P, int v, int rank, Transfer* t, bool v_shape) {
  const int vs = virtual_stage(P, rank, a.chunk, v_shape), last = P * v - 1;
  if (a.kind == A::kForward && vs > 0) *t = {Transfer::kActivation, a.micro, vs - 1, stage_rank(P, vs - 1, v_shape)};
  else if (a.kind == A::kBackward && vs < last) *t = {Transfer::kGradient, a.micro, vs + 1, stage_rank(P, vs + 1, v_shape)};
  else return false;
  return true;
}

bool sends(const PipelineAction& a, int P, int v, int rank, Transfer* t, bool v_shape) {
  const int vs = virtual_stage(P, rank, a.chunk, v_shape), last = P * v - 1;
  if (a.kind == A::kForward && vs < last) *t = {Transfer::kActivation, a.micro, vs, stage_rank(P, vs + 1, v_shape)};
  else if (a.kind == A::kBackward && vs > 0) *t = {Transfer::kGradient, a.micro, vs, stage_rank(P, vs - 1, v_shape)};
  else return false;
  return true;
}

int64_t pipeline_sends_per_step(PipelineSchedule s, int P, int m, int v, int rank) {
  Transfer t;
  int64_t n = 0;
  v = schedule_chunks(s, v);
  for (const auto& a : schedule_actions(s, P, m, v, rank)) n += sends(a, P, v, rank, &t, is_v_shape(s)) && t.peer != rank;
  return n;
}

Simulation simulate(PipelineSchedule s, int P, int m, int v) {
  v = schedule_chunks(s, v);
  std::vector<std::vector<A>> lists(P);
  for (int r = 0; r < P; ++r) lists[r] = schedule_actions(s, P, m, v, r);
  return simulate_lists(lists, P, m, v, splits_backward(s), is_v_shape(s));
}

Simulation simulate_lists(const std::vector<std::vector<PipelineAction>>& lists, int P, int m, int v, bool split,
                          bool v_shape) {
  Simulation sim;
  const auto cost = [&](const A& a) { return a.kind == A::kForward ? 1 : (a.kind == A::kBackward && !split ? 2 : 1); };

  // 1. Every rank runs each of its (micro, chunk) F, B (and W) exactly once.
  for (int r = 0; r < P && sim.problem.empty(); ++r) {
    std::set<std::tuple<int, int, int>> seen;
    for (const auto& a : lists[r])
      if (!seen.insert({a.kind, a.micro, a.chunk}).second) sim.problem = "rank " + std::to_string(r) + " runs " + to_string(a) + " twice";
    const size_t expected = size_t(m) * v * (split ? 3 : 2);
    if (sim.problem.empty() && seen.size() != expected)
      sim.problem = "rank " + std::to_string(r) + " runs " + std::to_string(seen.size()) + " actions, not " + std::to_string(expected);
  }
  // 2. Messages between two ranks with one tag arrive in posting order: the k-th sent
  //    must be the k-th expected.
  std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> sent, expected;  // (from, to, tag) -> (micro, stage)
  for (int r = 0; r < P; ++r)
    for (const auto& a : lists[r]) {
      Transfer t;
      if (sends(a, P, v, r, &t, v_shape)) sent[{r, t.peer, t.tag()}].push_back({t.micro, t.from_stage});
      if (receives(a, P, v, r, &t, v_shape)) expected[{t.peer, r, t.tag()}].push_back({t.micro, t.from_stage});
    }
  if (sim.problem.empty() && sent != expected) sim.problem = "the receives do not match the sends in order";
  if (!sim.problem.empty()) return sim;

  // 3. Run: each rank takes its next action as soon as its input exists.
  std::map<std::tuple<int, int, int>, int64_t> done;  // (kind, micro, virtual stage) -> finish time
  std::vector<size_t> next(P, 0);
  std::vector<int64_t> clock(P, 0);
  std::vector<int> alive(P, 0);
  sim.busy.assign(P, 0);
  sim.max_alive.assign(P, 0);
  sim.timeline.assign(P, {});
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      if (next[r] == lists[r].size()) continue;
      const A& a = lists[r][next[r]];
      const int vs = virtual_stage(P, r, a.chunk, v_shape);
      std::tuple<int, int, int> input{-1, 0, 0};  // what must exist before it runs
      if (a.kind == A::kForward && vs > 0) input = {A::kForward, a.micro, vs - 1};
      if (a.kind == A::kBackward) input = vs < P * v - 1 ? std::tuple{int(A::kBackward), a.micro, vs + 1}
                                                          : std::tuple{int(A::kForward), a.micro, vs};
      if (a.kind == A::kWeight) input = {A::kBackward, a.micro, vs};
      int64_t ready = 0;
      if (std::get<0>(input) >= 0) {
        const auto it = done.find(input);
        if (it == done.end()) continue;  // waits (for now)
        ready = it->second;
      }
      const int64_t start = std::max(clock[r], ready);
      sim.timeline[r].push_back({a, start, cost(a)});
      clock[r] = start + cost(a);
      sim.busy[r] += cost(a);
      done[{a.kind, a.micro, vs}] = clock[r];
      // Activations are held from the forward until the last backward pass that reads them.
      const bool frees = split ? a.kind == A::kWeight : a.kind == A::kBackward;
      alive[r] += a.kind == A::kForward ? 1 : frees ? -1 : 0;
      sim.max_alive[r] = std::max(sim.max_alive[r], alive[r]);
      ++next[r];
      progress = true;
    }
  }
  for (int r = 0; r < P; ++r)
    if (next[r] != lists[r].size()) {
      sim.problem = "deadlock: rank " + std::to_string(r) + " waits forever before " + to_string(lists[r][next[r]]);
      return sim;
    }
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < P; ++r) sim.idle.push_back(sim.makespan - sim.busy[r]);
  return sim;
}

double bubble_formula(PipelineSchedule s, int P, int m, int v) {
  switch (s) {
    case PipelineSchedule::kInterleaved: return double(P - 1) / (double(v) * m);
    case PipelineSchedule::kZbH1: return double(P - 1) / (3.0 * m);
    // dualpipev.h: P-1 idle (measured with each F&B pair run in sequence; the formula
    // (P-1)(F&B + B - 3W) with an overlapped F&B = 2, B = 2, W = 1), over 2m x 3 busy
    case PipelineSchedule::kDualPipeV: return double(P - 1) / (6.0 * m);
    default: return double(P - 1) / m;
  }
}

std::string bubble_formula_text(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kInterleaved: return "(P-1)/(v m)";
    case PipelineSchedule::kZbH1: return "(P-1)/(3m)";
    case PipelineSchedule::kDualPipeV: return "(P-1)(F&B+B-3W)/(6m) = (P-1)/(6m)";
    default: return "(P-1)/m";
  }
}

}  // namespace picotron
