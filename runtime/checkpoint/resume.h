// runtime/checkpoint/resume.h — checkpoints that resume bit-exactly, on the same mesh or any other.
//
//   D/step-000120/                       one checkpoint (written as step-000120.tmp/, renamed
//     manifest.json                      into place by rank 0 once every rank has written)
//     rank-00000.safetensors             what rank 0 owns: pieces of master weights and
//     rank-00001.safetensors             AdamW moments, "<name>/master", "/exp_avg", "/exp_avg_sq"
//
// A checkpoint holds everything the next step depends on: the fp32 (fp64) master
// weights (the bf16/fp16 weights are their rounding), both moments, AdamW's step count,
// the fp16 loss scale, and the step (the learning rate and the data are functions of
// it). Each rank writes only the pieces it owns: its shard (tp, pp) of each parameter,
// once per replica group, and under ZeRO its flat slice of the cp x dp group
// (OptimizerState::owned_state, picotron/optim_state.h, says which). A piece is
//
//   the box:  full tensor, cut along split_dim to [offset, offset + length)  (tp)
//   a range:  elements [flat_first, flat_first + flat_length) of the box, flattened  (ZeRO)
//
// and the manifest lists, for every tensor, its full shape and every piece with its
// file and FNV-1a checksum. Loading on any mesh: a rank rebuilds each tensor it needs
// from the pieces that overlap its own box (skipping the others) and keeps its slice.
//
// Test: ctest -R checkpoint   (tests/cmake/checkpoint_tests.cmake: bit-exact resume, the
// save-on-one-layout-resume-on-another table, bad checkpoints, a rank killed mid-save)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/optim.h"
#include "picotron/optim_state.h"
#include "runtime/checkpoint/safetensors.h"
#include "picotron/shard.h"

namespace picotron {

class Distributed;

// What the checkpoints read of the run's flags, cut from them in runtime/cli/settings.h.
struct CheckpointSettings {
  std::string save_dir;  // --save-dir ("": no checkpoints)
  int64_t save_every = 0;  // --save-every (0: only the run's last step)
  int keep = 2;  // --keep-checkpoints: the newest K are kept
  bool async = false;  // --async-save (runtime/checkpoint/async_save.h)
  std::string resume;  // --resume
  int64_t steps = 0;  // --steps, for "resumed from ...: step N of M"
  // The run's model, schedule and mesh (runtime/cli/settings.h: run_record), written into
  // each manifest as "config" and compared with it on --resume.
  nlohmann::json run;
};

// What a checkpoint carries besides tensors.
struct TrainingCounters {
  int64_t step = 0;             // optimizer steps done
  int64_t adam_steps = 0;       // AdamW's t (bias correction); fewer than step after fp16 skips
  double loss_scale = 1.0;      // fp16 loss scaler
  int64_t loss_scale_clean_steps = 0;
};

// Writes D/step-NNNNNN atomically (collective over `world`): every rank its file into
// step-NNNNNN.tmp, then rank 0 the manifest, the rename, and the pruning to the newest
// `keep`. Returns the checkpoint's path. Throws one line on failure.
std::string save_checkpoint(const std::string& dir, const CheckpointSettings& settings,
                            const TrainingCounters& counters, const std::vector<StatePiece>& owned, Comm& world);

// save_checkpoint's three phases, so that the middle one can run in the background
// (runtime/checkpoint/async_save.h): begin_save (collective) makes D/step-NNNNNN.tmp and returns it;
// write_rank_file (local) writes this rank's pieces there, "" or the problem;
// finish_save (collective) agrees that every rank wrote, then rank 0 writes the manifest,
// renames and prunes. Returns the checkpoint's path; throws one line.
std::string begin_save(const std::string& dir, int64_t step, Comm& world);
std::string write_rank_file(const std::string& tmp, int64_t step, int rank, int world_size,
                            const std::vector<StatePiece>& owned);
std::string finish_save(const std::string& dir, const CheckpointSettings& settings, const TrainingCounters& counters,
                        const std::string& write_problem, Comm& world);

// --save-dir: whether the step just done (1-based) is saved: every --save-every steps,
// and the run's last.
bool checkpoint_due(const CheckpointSettings& settings, int64_t step_done, int64_t end_step);
// --save-dir D: rank 0 holds an exclusive lock on D/.picotron-lock (flock) for the whole
// run, so a second run saving into D at the same time stops at start with one line
// naming the first one's pid, instead of the two pruning each other's checkpoints.
// Returns the lock's file descriptor (kept open until the process ends).
int lock_save_dir(const std::string& dir);
// save_checkpoint into --save-dir, then rank 0 prints where, its size and the time taken.
void save_checkpoint(const CheckpointSettings& settings, const TrainingCounters& counters,
                     const std::vector<StatePiece>& owned, Comm& world);

// The bytes of the files in a directory (a checkpoint's size).
int64_t directory_bytes(const std::string& dir);

// D itself when it holds a manifest.json, else its newest step-NNNNNN with one.
// Throws "--resume D: ..." when there is none.
std::string resolve_checkpoint(const std::string& path);

// An opened checkpoint: the manifest read and checked; tensors assembled on demand.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& checkpoint_dir);
  const std::string& path() const { return dir_; }
  TrainingCounters counters() const;
  const nlohmann::json& config() const { return manifest_.at("config"); }
  const nlohmann::json& manifest() const { return manifest_; }
  // A file whose every tensor's checksum was checked (runtime/checkpoint/checkpoint_check.h): its
  // pieces are not hashed again as they are read.
  void mark_verified(const std::string& file) { verified_.push_back(file); }
  // Its checksums use the older FNV-1a offset basis (saved before 2026-11-28; safetensors.h).
  bool older_checksums() const { return older_sums_; }
  // Elements [first, first + length) of the flattened box `record` of tensor `key`
  // (length < 0: the whole box), in the stored dtype, on the CPU.
  torch::Tensor read(const std::string& key, const ShardRecord& record, int64_t first = 0, int64_t length = -1);
  // Problems that stop a resume (a different model shape), and warnings (a different
  // schedule or batch), against the run's record (CheckpointSettings::run): one line each.
  std::vector<std::string> incompatibilities(const nlohmann::json& run, std::vector<std::string>* warnings) const;

 private:
  std::string dir_;
  nlohmann::json manifest_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::string> verified_;
  bool older_sums_ = false;
  std::string cached_key_, cached_box_;  // the last assembled tensor (one at a time in memory)
  torch::Tensor cached_, cached_covered_;
  const SafetensorsFile& file(const std::string& name);
};

// Sets the optimizer's master weights, moments and step count, and the model's weights,
// from the checkpoint (this rank's pieces only: OptimizerState::load_state).
void load_state(CheckpointReader& reader, Optimizer& optimizer);

// --resume, on every rank: find the checkpoint, check it against the flags, load this
// rank's pieces and the loss scale. Any rank's problem (a missing or corrupt file, another
// model, nothing left to train) stops every rank with its line, together (exit 2).
// Returns the step to start at.
int64_t resume_run(const CheckpointSettings& settings, int64_t end_step, Optimizer& optimizer, LossScaler& scaler, Comm& world,
                   Distributed& dist);

// The start of a run's checkpoints: rank 0 locks --save-dir (lock_save_dir), then
// --resume loads the checkpoint (resume_run). Returns the step to start at: 0 without
// --resume.
int64_t start_checkpoints(const CheckpointSettings& settings, int64_t end_step, Optimizer& optimizer, LossScaler& scaler,
                          Comm& world, Distributed& dist);

}  // namespace picotron
