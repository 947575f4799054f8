// runtime/checkpoint/async_save.h — the checkpoints of a run, saved in the loop's step or, with
// --async-save, written in the background while training goes on.
//
//   step k ends ──> copy this rank's pieces to host memory (a clone)    ┐ the stall: the
//                   begin_save: rank 0 makes step-k.tmp/ (collective)   ┘ only wait
//                   a thread: write_rank_file (checksums + write) ───────────┐
//   steps k+1, k+2 ... train; after each: has every rank's write ended?      │ training
//                   (one all-reduce of a flag, only while a write is on)     │ goes on
//       yes ──> finish_save: rank 0's manifest, then the rename  <───────────┘
//   the next save, or the end of the run, waits for the write and finishes it
//
// The rename stays the commit point: a job killed during a background write leaves
// step-k.tmp/ (ignored by --resume) beside the last complete checkpoint. Writes never
// overlap each other, so at most one copy of the state is held in host memory.
// Communication stays on the training thread: the background thread only hashes and
// writes this rank's file.
//
// Test: ctest -R 'checkpoint\.(async|bitexact_async)'
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "picotron/comm.h"
#include "picotron/optim.h"
#include "picotron/optim_state.h"
#include "runtime/observe/measure.h"
#include "runtime/checkpoint/resume.h"

namespace picotron {

class Checkpointer {
 public:
  Checkpointer(CheckpointSettings settings, Comm& world) : settings_(std::move(settings)), world_(world) {}
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;
  ~Checkpointer();  // an unwinding run: waits for the write, leaves it unfinished (.tmp)

  // The start of the run, on every rank: rank 0 locks --save-dir, then --resume loads the
  // checkpoint (start_checkpoints, resume.h). Returns the step to start at: 0 without --resume.
  int64_t open(int64_t end_step, Optimizer& optimizer, LossScaler& scaler, Distributed& dist) {
    return start_checkpoints(settings_, end_step, optimizer, scaler, world_, dist);
  }
  // After step `step_done` (1-based), on every rank: finishes a background write that
  // every rank has ended; saves when --save-every or the end of the run says so
  // (checkpoint_due), in the step or in the background.
  void after_step(int64_t step_done, int64_t end_step, const TrainingCounters& counters,
                  const std::vector<StatePiece>& owned);
  // The end of the run: waits for the write in flight and finishes it.
  void finish();

 private:
  struct Pending {  // a background write
    TrainingCounters counters;
    std::string tmp;                 // D/step-NNNNNN.tmp
    std::vector<StatePiece> host;    // the pieces' copies, in host memory
    double stall_s = 0;              // what the step waited for: the copy and begin_save
    double started_s = 0;            // when the write began (clock_)
    std::string problem;             // the write's outcome ("" when it succeeded)
    std::atomic<bool> done{false};
    std::thread thread;
  };
  void start(const TrainingCounters& counters, const std::vector<StatePiece>& owned);
  void complete();  // join, finish_save, the "saved checkpoint" line

  const CheckpointSettings settings_;
  Comm& world_;
  std::unique_ptr<Pending> pending_;
  Timer clock_;
};

}  // namespace picotron
