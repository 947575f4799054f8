// runtime/observe/flight_recorder.h — every rank's last N communications, kept in a ring, and
// written to DIR/comms-rank<R>.json when the job goes wrong, so that a hang can be
// explained after the fact (scripts/hang_report.py DIR reads every rank's file).
//
// Why. A hang is ranks waiting in different communications: rank 0 in the 7th all_reduce
// of "dp", rank 1 still in its 6th, or both pipeline stages in a send to each other.
// The watchdog (--timeout-s) ends the job and says where ONE rank waited; to say why,
// every rank's recent history is needed, side by side. PyTorch's c10d keeps the same
// thing ("flight recorder", TORCH_NCCL_TRACE_BUFFER_SIZE) and dumps it on a timeout.
//
// A listener at Comm's one seam (picotron/comm_listener.h): given to the world, it hears
// every group the run makes and every communication, one entry per collective or per P2POp.
// What one entry holds:
//
//   id 812  group "pp" (world ranks 0,1)  send #5 to group rank 1 (world 1)
//           8192 float32  pipeline_parallel/pipeline_parallel.cpp:230 exchange
//           note "[micro-batch 2, stage 0 -> 1] pipeline: an activation, ..."   batch 811
//           issued at 3.201 s, completed at 3.209 s   (or "issued": posted; "waiting": the
//           host waits in it, Work::wait)
//
// Numbering. seq is the seam's (comm_listener.h): for a collective, the group's collectives
// so far (every rank of the group issues the same seq-th collective); for a send, the sends
// so far to that peer, for a receive the receives from that peer (the k-th send from a to b
// is the k-th receive b posts from a: NCCL's pairing rule, pipeline_parallel/p2p_program.h).
// So two ranks' files compare entry by entry. The note is the communication's title
// (runtime/observe/comm_title.h), composed when the file is written, not per call.
//
// Cost. One entry is a few stores into a preallocated slot under an uncontended mutex
// (the NCCL watchdog and the dump thread also touch the ring); no string is built. docs/reliability.md has the measured step times.
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
// Test: ctest -L flight   (tests/cmake/flight_tests.cmake)
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

#include "picotron/comm_listener.h"

namespace picotron {

struct FlightEntry {
  enum State : uint8_t { kIssued, kWaiting, kCompleted };  // posted; the host waits in it; done
  int64_t id = -1;             // this rank's communication number, 0, 1, ...: the slot is id % capacity
  int group = -1;              // the group's id (CommGroup::id)
  const char* op = "";         // "all_reduce", ..., "send", "recv" (static strings, as in the ledger)
  const char* reduce = "";     // "sum", "avg", "max" for reductions
  int64_t seq = 0;             // see the header: the group's collective number, or the pair's message number
  int64_t elements = 0;        // as the ledger counts them
  torch::ScalarType dtype = torch::kFloat;
  int peer = -1;               // send / recv: the other rank, within the group; broadcast: the root
  int64_t batch = -1;          // send / recv: id of the first op posted with it (one ncclGroup / one wait)
  bool async = false;          // posted now, waited for later (Work::wait)
  CallSite at;                 // where, and what it carries
  StepPlace place;             // where in the step
  bool backward = false;
  State state = kIssued;
  double issued_s = 0, waiting_s = 0, completed_s = 0;  // seconds since the recorder started
};

class FlightRecorder : public CommListener {
 public:
  // capacity: how many entries are kept (the oldest are overwritten). timeout_s: the Comms'
  // (in the file: a rank that waited longer without timing out itself was not running).
  FlightRecorder(int world_rank, int world_size, int64_t capacity, int64_t timeout_s);
  ~FlightRecorder() override;  // stops the pause watch
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Where dump() writes: dir/comms-rank<R>.json (created with its parents). Empty: nowhere.
  void set_dump_dir(std::string dir);
  const std::string& dump_dir() const { return dir_; }
  // " flight recorder: every rank's last communications are in DIR; read them with:
  // scripts/hang_report.py DIR" — appended to the timeout line ("" without a dump dir).
  std::string hint() const;

  // ---- the seam (picotron/comm_listener.h) --------------------------------------------
  void joined(const CommGroup& group) override;
  // One entry per collective or P2POp; a batch's share `batch` (the first's id).
  void issued(const CommGroup& group, const CommEvent& e) override;
  void waiting(CommOps ops) override;  // the host starts waiting for them (Work::wait)
  void completed(CommOps ops) override;
  // A timeout or a communication error (ending: the NCCL watchdog ends the process without
  // unwinding): the file is written now; returns the words for the error line, naming the
  // files only when they were written (else saying that they could not be).
  std::string failing(const std::string& why, bool ending) override;
  bool written() const;  // a file was written (by failing(), a signal, ...)

  // The run this rank belongs to: an id every rank of one launch shares, and when it was
  // launched (rank 0's clock). In the file, so that scripts/hang_report.py reads only one
  // run's files from a folder several runs wrote into.
  void set_run(std::string id, double launched_unix_s);

  // Writes the file (tmp + rename). Returns its path, or "" (no dir, or it failed: then
  // one line on stderr says why). Safe from any thread; never throws.
  std::string dump(const std::string& reason) const;
  std::string to_json(const std::string& reason) const;  // the file's contents

  int64_t recorded() const;  // entries issued so far (the ring keeps the last `capacity`)

  // From a signal handler (a crash: SIGSEGV, SIGABRT, ...): the newest 256 entries to the same
  // file, with async-signal-safe calls only (no allocation, no lock). See the .cpp.
  void write_from_signal(int sig) const;

 private:
  double now_s() const;

  void set_state(CommOps ops, FlightEntry::State state);
  const FlightEntry* slot_of(int64_t id) const;  // the slot holding entry `id`, or null (overwritten, not yet)
  int world_rank_, world_size_;
  int64_t timeout_s_;
  std::string dir_;
  std::chrono::steady_clock::time_point start_;
  double start_unix_s_;             // the same moment on the wall clock (to line ranks up)
  mutable std::mutex mutex_;
  mutable std::mutex dump_mutex_;   // one dump at a time (an error and a signal may race)
  std::vector<CommGroup> groups_;   // [group id]
  int64_t capacity_;                // the most entries kept
  std::vector<FlightEntry> ring_;   // grows to [capacity_] as entries come
  std::string run_id_;              // set_run
  double launched_unix_s_ = 0;
  mutable bool written_ = false;    // a file was written (dump is const)
  std::vector<char> crash_path_, crash_tmp_;  // made by set_dump_dir, for write_from_signal
  int64_t recorded_ = 0;            // entries issued to this recorder
  int64_t first_id_ = -1, next_id_ = 0;  // the first id it heard, and the last one + 1
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
