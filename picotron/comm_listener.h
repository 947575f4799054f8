// picotron/comm_listener.h — the one seam between Comm and whatever observes a run.
//
// A technique calls a collective; Comm checks it, moves the data, and tells its listeners
// what happened, in four kinds of message:
//
//   joined(group)           a communicator was made: the world, or any group split from it
//                           (the mesh's, the pipeline's embedding group, the hybrid's
//                           all-to-all and ring groups, HSDP's, hpZ's, the experts'), with
//                           its name and its members' world ranks
//   issued(group, event)    one collective, or one send / receive of a batch: kind, elements,
//                           dtype, peer, call site, what it carries, where in the step
//                           (picotron/step_place.h), its number in the process (id) and in
//                           its group (seq)
//   waiting(ops) / completed(ops)   the host starts waiting for a call's operations; they are done
//   failing(why, ending)    a communication failed (a timeout, a library error); ending: the
//                           process ends right after (the NCCL watchdog) without unwinding
//
// Who listens: the ledger (below, always: --comm-report and the volume tests read it), the
// --explain narrator (runtime/observe/explain.h) and the flight recorder
// (runtime/observe/flight_recorder.h). A world Comm and every group split from it share one
// CommListeners, so a listener added once hears every group the run ever makes, the ones
// made before it was added included (it is told they joined). No list of groups is kept by
// hand anywhere.
//
// Numbering (seq): what must match across ranks. For a collective, the group's collectives so
// far (every rank of the group issues the same seq-th one); for a send, the sends so far to
// that peer; for a receive, the receives from that peer (the k-th send from a to b is the k-th
// receive b posts from a: NCCL's pairing rule). So two ranks' records compare entry by entry.
//
// Threads. Communications are issued by the main thread or autograd's, completed by those or
// the NCCL watchdog's: every message is delivered under one mutex, in order. A listener must
// not call Comm back.
//
// Test: ctest -R "comm|explain|flight|ledger"
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/types.h>

#include "picotron/step_place.h"

namespace picotron {

// Where a communication was issued from, and what it carries. Each collective takes one as
// its last argument, defaulted to CallSite::here(): the compiler fills in the CALLER's file,
// line and function (a default argument is evaluated at the call site). To say what the
// collective carries, write carries("...") there instead: the same, plus the words.
//
//   tp.all_reduce(out, ReduceOp::kSum, carries("g: each rank's partial result, summed over tp"));
//
// The words are a literal: nothing is built at run time, and nothing is paid without a
// listener that reads them.
struct CallSite {
  const char* file = "";
  int line = 0;
  const char* function = "";
  const char* carries = "";  // what the communication carries ("": not said)
  static CallSite here(const char* file = __builtin_FILE(), int line = __builtin_LINE(),
                       const char* function = __builtin_FUNCTION()) {
    return {file, line, function, ""};
  }
};
inline CallSite carries(const char* what, const char* file = __builtin_FILE(), int line = __builtin_LINE(),
                        const char* function = __builtin_FUNCTION()) {
  return {file, line, function, what};
}

// One communication as it is issued. The shapes are views of the tensors' sizes, valid during
// the listeners' call (no copies on the way of every collective).
struct CommEvent {
  const char* kind = "";         // "all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                 // "all_to_all", "send", "recv", "barrier"
  const char* reduce = "";       // "sum", "avg", "max" for reductions, else ""
  torch::IntArrayRef in_shape;   // the tensor given (in place: the only one)
  torch::IntArrayRef out_shape;  // all_gather / reduce_scatter / all_to_all: the output; else empty
  torch::ScalarType dtype = torch::kFloat;
  int64_t elements = 0;          // as the ledger counts them (picotron/comm.h)
  int peer = -1;                 // send / recv: the other rank (within the group); broadcast: the root
  bool async = false;            // posted now, waited for later (Work::wait)
  CallSite at;                   // where, and what it carries
  // Filled in by CommListeners::issue:
  int group = -1;                // the group's id (CommGroup::id)
  int64_t id = -1;               // this process's communication number, 0, 1, ...
  int64_t seq = 0;               // see the header: the group's collective number, or the pair's message number
  int64_t batch = -1;            // send / recv: the id of the first operation posted with it
  StepPlace place;               // where in the step (picotron/step_place.h)
  bool backward = false;         // issued inside autograd's backward
};

// A communicator as listeners know it.
struct CommGroup {
  int id = -1;                   // 0, 1, ... in the order the groups were made on this rank
  std::string name;              // "world", "tp", "cp_a2a", ...
  int size = 1, rank = 0;        // its size, and this rank's rank in it
  std::vector<int> world_ranks;  // index = group rank (empty when nobody could tell: torchrun)
};

// The operations of one call: ids first .. first + count - 1 (a batch has one per operation).
struct CommOps {
  int64_t first = -1;
  int count = 0;
};

class CommListener {
 public:
  virtual ~CommListener() = default;
  virtual void joined(const CommGroup& /*group*/) {}
  virtual void issued(const CommGroup& /*group*/, const CommEvent& /*event*/) {}
  virtual void waiting(CommOps /*ops*/) {}
  virtual void completed(CommOps /*ops*/) {}
  // Returns words for the error line (where the evidence is), or "".
  virtual std::string failing(const std::string& /*why*/, bool /*ending*/) { return ""; }
};

// One line of the ledger: how many calls of one kind, and their elements (see comm.h).
struct CommCount {
  int64_t calls = 0, elements = 0;
};

// The ledger's kinds, in the order reports list them.
inline constexpr const char* kCommKinds[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                             "all_to_all", "send",       "recv",           "barrier"};

// The listeners of one world and its groups, and the ledger, which always listens.
class CommListeners {
 public:
  // A new listener hears of every group made so far, then of everything after.
  void add(std::shared_ptr<CommListener> listener);
  void remove(const CommListener* listener);

  // ---- what Comm tells (comm.cpp) -----------------------------------------------------
  int join(CommGroup group);  // returns the group's id
  // Numbers the event (id, seq, batch), adds where in the step it is, counts it in the
  // ledger, and tells every listener. Returns its id.
  int64_t issue(int group, CommEvent event, int64_t batch = -1);
  void waiting(CommOps ops);
  void completed(CommOps ops);
  std::string failing(const std::string& why, bool ending);

  // ---- the ledger: calls and elements per group and kind ------------------------------
  std::vector<CommGroup> groups() const;
  std::map<std::string, CommCount> ledger(int group) const;
  void reset_ledger(int group);  // one group's
  void reset_ledgers();          // every group's
  // A table with one row per (group, kind) called since the last reset: group, its
  // size, kind, calls, elements, and both per step (divided by `steps` >= 1), e.g.
  //   communication of rank 0 over 10 steps (elements of the full buffer, see comm.h)
  //   group   size  kind               calls      elements  calls/step  elements/step
  //   dp         2  all_reduce            10       1234560           1         123456
  // or one line saying there was no communication. Every group the run made is in it.
  std::string report(int world_rank, int64_t steps) const;

 private:
  struct Counters {
    int64_t collectives = 0;
    std::vector<int64_t> sent, received;  // per peer (group rank)
    std::map<std::string, CommCount> ledger;
  };
  mutable std::mutex mutex_;
  std::vector<CommGroup> groups_;
  std::vector<Counters> counters_;  // [group id]
  std::vector<std::shared_ptr<CommListener>> listeners_;
  int64_t next_id_ = 0;
};

}  // namespace picotron
