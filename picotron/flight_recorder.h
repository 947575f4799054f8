// picotron/flight_recorder.h — every rank's last N communications, kept in a ring, and
// written to DIR/comms-rank<R>.json when the job goes wrong, so that a hang can be
// explained after the fact (scripts/hang_report.py DIR reads every rank's file).
//
// Why. A hang is ranks waiting in different communications: rank 0 in the 7th all_reduce
// of "dp", rank 1 still in its 6th, or both pipeline stages in a send to each other.
// The watchdog (--timeout-s) ends the job and says where ONE rank waited; to say why,
// every rank's recent history is needed, side by side. PyTorch's c10d keeps the same
// thing ("flight recorder", TORCH_NCCL_TRACE_BUFFER_SIZE) and dumps it on a timeout.
//
// What one entry holds (Comm records it, one entry per collective or per P2POp):
//
//   id 812  group "pp" (world ranks 0,1)  send #5 to group rank 1 (world 1)
//           8192 float32  pipeline_parallel/pipeline_parallel.cpp:230 exchange
//           note "[pipeline] send activation a2 of micro-batch 2 ..."   batch 811
//           issued at 3.201 s, completed at 3.209 s   (or "issued": posted; "waiting": the
//           host waits in it, Work::wait)
//
// Numbering. seq counts what must match across ranks: for a collective, the group's
// collectives so far (every rank of the group issues the same seq-th collective); for a
// send, the sends so far to that peer, for a receive the receives from that peer (the
// k-th send from a to b is the k-th receive b posts from a: NCCL's pairing rule,
// pipeline_parallel/p2p_program.h). So two ranks' files compare entry by entry.
//
// Cost. One entry is a few stores into a preallocated slot under an uncontended mutex
// (the NCCL watchdog and the dump thread also touch the ring); the note is copied into
// a string that keeps its capacity. docs/reliability.md has the measured step times.
//
// Pauses. A thread of the recorder wakes every 100 ms; a gap of seconds between two of its
// wake-ups is time the whole process did not run: SIGSTOP, a debugger holding it, a
// swapped-out machine. The file keeps the longest ("paused_s", and the last entry issued
// before it), including a pause still going on when the file is written. This is how the
// report tells the rank that stopped from the ranks that waited for it.
//
// Threads. Entries are issued by the thread issuing communications, completed by it or
// by the NCCL watchdog thread, and dumped by any thread (a signal's, the watchdog's):
// every access takes the mutex. dump() never throws and never communicates, so it works
// when every other rank is dead.
//
// Test: ctest -L flight   (tests/flight_tests.cmake)
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/types.h>

#include "picotron/comm.h"

namespace picotron {

struct FlightEntry {
  enum State : uint8_t { kIssued, kWaiting, kCompleted };  // posted; the host waits in it; done
  int64_t id = -1;             // this rank's record number, 0, 1, ...: the slot is id % capacity
  int group = -1;              // index into the recorder's groups
  const char* op = "";         // "all_reduce", ..., "send", "recv" (static strings, as in the ledger)
  const char* reduce = "";     // "sum", "avg", "max" for reductions
  int64_t seq = 0;             // see the header: the group's collective number, or the pair's message number
  int64_t elements = 0;        // as the ledger counts them
  torch::ScalarType dtype = torch::kFloat;
  int peer = -1;               // send / recv: the other rank, within the group; broadcast: the root
  int64_t batch = -1;          // send / recv: id of the first op posted with it (one ncclGroup / one wait)
  bool async = false;          // posted now, waited for later (Work::wait)
  CallSite at;
  std::string note;            // what it carries (Comm::note), "" when nobody said
  State state = kIssued;
  double issued_s = 0, waiting_s = 0, completed_s = 0;  // seconds since the recorder started
};

class FlightRecorder {
 public:
  // capacity: how many entries are kept (the oldest are overwritten). timeout_s: the Comms'
  // (in the file: a rank that waited longer without timing out itself was not running).
  FlightRecorder(int world_rank, int world_size, int64_t capacity, int64_t timeout_s);
  ~FlightRecorder();  // stops the pause watch
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Where dump() writes: dir/comms-rank<R>.json (created with its parents). Empty: nowhere.
  void set_dump_dir(std::string dir);
  const std::string& dump_dir() const { return dir_; }
  // " flight recorder: every rank's last communications are in DIR; read them with:
  // scripts/hang_report.py DIR" — appended to the timeout line ("" without a dump dir).
  std::string hint() const;

  // A group joins when a Comm is given the recorder (Comm::set_flight_recorder); returns its index.
  int add_group(const std::string& name, std::vector<int> world_ranks, int my_rank);

  // What the group's next call carries (kept until that call has been issued).
  void note(int group, const std::string& what);
  // One entry per collective; a batch's sends and receives share `batch` (the first's id,
  // -1 for the first itself). `last`: the call's last entry (the note is used up).
  int64_t issue(int group, const CommEvent& e, int64_t batch = -1, bool last = true);
  void waiting(FlightMark mark);    // the host starts waiting for them (Work::wait)
  void completed(FlightMark mark);

  // Writes the file (tmp + rename). Returns its path, or "" (no dir, or it failed: then
  // one line on stderr says why). Safe from any thread; never throws.
  std::string dump(const std::string& reason) const;
  std::string to_json(const std::string& reason) const;  // the file's contents

  int64_t recorded() const;  // entries issued so far (the ring keeps the last `capacity`)

 private:
  struct Group {
    std::string name;
    std::vector<int> world_ranks;   // index = group rank (empty when nobody could tell: torchrun)
    int rank = 0;                   // this rank's rank in the group
    int64_t collectives = 0;        // collectives issued so far
    std::vector<int64_t> sent, received;  // per peer (group rank): messages so far
    std::string note;               // the next call's note
  };
  double now_s() const;

  void set_state(FlightMark mark, FlightEntry::State state);
  int world_rank_, world_size_;
  int64_t timeout_s_;
  std::string dir_;
  std::chrono::steady_clock::time_point start_;
  double start_unix_s_;             // the same moment on the wall clock (to line ranks up)
  mutable std::mutex mutex_;
  mutable std::mutex dump_mutex_;   // one dump at a time (an error and a signal may race)
  std::vector<Group> groups_;
  std::vector<FlightEntry> ring_;   // [capacity]
  int64_t next_id_ = 0;
  // The pause watch (see the header): its thread's last wake-up, the longest gap so far and
  // the last entry issued before it.
  void watch_pauses();
  std::atomic<double> last_beat_s_{0}, longest_pause_s_{0};
  std::atomic<int64_t> paused_after_{-1};
  std::mutex beat_mutex_;
  std::condition_variable beat_stop_;
  bool stopping_ = false;           // (beat_mutex_)
  std::thread beat_;
};

}  // namespace picotron
