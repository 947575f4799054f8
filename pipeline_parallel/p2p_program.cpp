// pipeline_parallel/p2p_program.cpp — see p2p_program.h for NCCL's rules and the rounds.
#include "pipeline_parallel/p2p_program.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace picotron {

namespace {

using A = PipelineAction;
using Key = std::tuple<int, int, int>;  // a tensor: (Transfer kind, micro-batch, sender's virtual stage)

Key key_of(const Transfer& t) { return {t.kind, t.micro, t.from_stage}; }

std::vector<std::vector<A>> all_lists(PipelineSchedule s, int P, int m, int v) {
  std::vector<std::vector<A>> lists(P);
  for (int r = 0; r < P; ++r) lists[r] = schedule_actions(s, P, m, v, r);
  return lists;
}

}  // namespace

std::vector<std::vector<PipelineStep>> pipeline_programs(PipelineSchedule s, int P, int m, int v) {
  v = schedule_chunks(s, v);
  return programs_for_lists(all_lists(s, P, m, v), P, v, is_v_shape(s));
}

std::vector<std::vector<PipelineStep>> forward_only_programs(PipelineSchedule s, int P, int m, int v) {
  v = schedule_chunks(s, v);
  auto lists = all_lists(s, P, m, v);
  for (auto& list : lists)
    list.erase(std::remove_if(list.begin(), list.end(), [](const A& a) { return a.kind != A::kForward; }), list.end());
  return programs_for_lists(lists, P, v, is_v_shape(s));
}

std::vector<std::vector<PipelineStep>> programs_for_lists(const std::vector<std::vector<PipelineAction>>& lists, int P, int v,
                                                         bool v_shape) {
  std::vector<std::vector<PipelineStep>> programs(P);
  std::vector<size_t> next(P, 0);
  std::set<Key> produced;  // tensors made in earlier rounds, kept by their senders until asked for
  // BEGIN ASSIGNMENT pp.p2p_program
  for (;;) {
    std::vector<PipelineStep> round(P);
    bool left = false;
    for (int r = 0; r < P; ++r) {
      if (next[r] == lists[r].size()) continue;
      left = true;
      const A& a = lists[r][next[r]];
      Transfer in;
      if (receives(a, P, v, r, &in, v_shape)) {
        if (!produced.count(key_of(in))) continue;  // its input does not exist yet: r sits this round out
        Transfer out = in;
        out.peer = r;  // the sender's view: the same tensor, going to r
        if (in.peer != r) {  // (the V's bottom hands stage P-1's output to itself: no message)
          round[in.peer].exchange.push_back({/*send=*/true, out});
          round[r].exchange.push_back({/*send=*/false, in});
        }
      }
      round[r].action = a;
    }
    if (!left) break;
    bool ran = false;
    for (int r = 0; r < P; ++r) {
      auto& ops = round[r].exchange;  // sends first (a rank's order inside a group does not matter to NCCL)
      std::stable_partition(ops.begin(), ops.end(), [](const PipelineStep::Op& o) { return o.send; });
      if (round[r].action) {
        Transfer made;
        if (sends(*round[r].action, P, v, r, &made, v_shape)) produced.insert(key_of(made));
        ++next[r];
        ran = true;
      }
      if (!ops.empty() || round[r].action) programs[r].push_back(std::move(round[r]));
    }
    if (!ran) throw std::logic_error("pipeline programs: the lists cannot progress (an input is never made)");
  }
  // END ASSIGNMENT
  return programs;
}

std::vector<std::vector<PipelineStep>> one_transfer_at_a_time(PipelineSchedule s, int P, int m, int v) {
  v = schedule_chunks(s, v);
  const bool vee = is_v_shape(s);
  const auto lists = all_lists(s, P, m, v);
  std::vector<std::vector<PipelineStep>> programs(P);
  for (int r = 0; r < P; ++r)
    for (const A& a : lists[r]) {
      Transfer t;
      if (receives(a, P, v, r, &t, vee) && t.peer != r) programs[r].push_back({{{false, t}}, std::nullopt});
      programs[r].push_back({{}, a});
      if (sends(a, P, v, r, &t, vee) && t.peer != r) programs[r].push_back({{{true, t}}, std::nullopt});
    }
  return programs;
}

std::string to_string(const PipelineStep& step) {
  std::string out;
  for (const auto& op : step.exchange)
    out += std::string(out.empty() ? "[" : ", ") + (op.send ? "send " : "recv ") +
           (op.t.kind == Transfer::kActivation ? "a" : "g") + std::to_string(op.t.micro) +
           (op.send ? " to " : " from ") + std::to_string(op.t.peer);
  if (!out.empty()) out += "]";
  if (step.action) out += (out.empty() ? "" : " ") + to_string(*step.action);
  return out;
}

std::string pipeline_programs_text(PipelineSchedule s, int P, int m, int v) {
  std::string out = "p2p program per step ([a group of sends and receives, posted together] action; a/g: activation/gradient):";
  const auto programs = pipeline_programs(s, P, m, v);
  for (int r = 0; r < P; ++r) {
    out += "\n  pp rank " + std::to_string(r) + ":";
    for (const auto& step : programs[r]) out += " " + to_string(step);
  }
  return out;
}

InOrderRun simulate_in_order(const std::vector<std::vector<PipelineStep>>& programs, bool split, bool v_shape) {
  InOrderRun run;
  const int P = int(programs.size());
  int v = 1;
  for (const auto& program : programs)
    for (const auto& step : program)
      if (step.action) v = std::max(v, step.action->chunk + 1);

  // 1. Each rank sends only tensors it has made, and runs an action only once its input
  //    has arrived. An operation's place on its channel: (send?, from, to, k-th).
  using Slot = std::tuple<bool, int, int, int>;
  std::map<Slot, Key> slot_tensor;
  std::vector<std::vector<std::vector<Slot>>> slots(P);  // per rank, per step: its operations' slots
  for (int r = 0; r < P; ++r) {
    std::map<std::pair<bool, int>, int> count;  // (send?, peer) -> operations so far
    std::set<Key> made, arrived;
    for (const auto& step : programs[r]) {
      slots[r].emplace_back();
      for (const auto& op : step.exchange) {
        if (op.send && !made.count(key_of(op.t)))
          return run.problem = "rank " + std::to_string(r) + " sends " + to_string(step) + " before making it", run;
        if (!op.send) arrived.insert(key_of(op.t));
        const Slot slot{op.send, op.send ? r : op.t.peer, op.send ? op.t.peer : r, count[{op.send, op.t.peer}]++};
        slots[r].back().push_back(slot);
        slot_tensor[slot] = key_of(op.t);
      }
      if (!step.action) continue;
      Transfer t;
      if (receives(*step.action, P, v, r, &t, v_shape) && !(t.peer == r ? made : arrived).count(key_of(t)))
        return run.problem = "rank " + std::to_string(r) + " runs " + to_string(*step.action) + " before its input arrives", run;
      if (sends(*step.action, P, v, r, &t, v_shape)) made.insert(key_of(t));
    }
  }
  // 2. One channel per pair: the k-th send a -> b is the k-th receive at b from a, so
  //    both must mean the same tensor.
  for (const auto& [slot, tensor] : slot_tensor) {
    const auto& [send, from, to, k] = slot;
    const auto partner = slot_tensor.find({!send, from, to, k});
    if (send && (partner == slot_tensor.end() || partner->second != tensor))
      return run.problem = "message " + std::to_string(k) + " from rank " + std::to_string(from) + " to rank " +
                           std::to_string(to) + " is not received as the tensor sent",
             run;
  }
  // 3. Run in order: a group waits until every partner operation has been posted.
  std::map<Slot, int64_t> posted;  // when each operation's group was reached
  std::vector<size_t> pc(P, 0);
  std::vector<int64_t> clock(P, 0);
  run.busy.assign(P, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r)
      while (pc[r] < programs[r].size()) {
        const auto& ops = slots[r][pc[r]];
        for (const Slot& s : ops) posted.emplace(s, clock[r]);
        int64_t done = clock[r];
        bool complete = true;
        for (const auto& [send, from, to, k] : ops) {
          const auto partner = posted.find({!send, from, to, k});
          if (partner == posted.end()) complete = false;
          else done = std::max(done, partner->second);
        }
        if (!complete) break;  // blocked in this group
        const auto& action = programs[r][pc[r]].action;
        const int64_t cost = !action ? 0 : action->kind == A::kForward ? 1 : (action->kind == A::kBackward && !split ? 2 : 1);
        clock[r] = done + cost;
        run.busy[r] += cost;
        ++pc[r];
        progress = true;
      }
  }
  for (int r = 0; r < P; ++r)
    if (pc[r] < programs[r].size())
      return run.problem = "deadlock: rank " + std::to_string(r) + " waits forever in " + to_string(programs[r][pc[r]]), run;
  run.makespan = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < P; ++r) run.idle.push_back(run.makespan - run.busy[r]);
  return run;
}

}  // namespace picotron
