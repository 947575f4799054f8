// runtime/checkpoint/checkpoint_check.h — a checkpoint verified whole before anything trusts it:
// every tensor of every rank file against the manifest.
//
//   manifest.json   "tensors": {key: {dtype, full_shape, pieces: [{file, box, range, fnv1a64}]}}
//        |                     what each rank file must hold, and nothing else
//        v
//   rank-0000r.safetensors     its header: {key: {dtype, shape, data_offsets}}; its bytes
//
// For each file: every tensor its header lists is one the manifest puts in that file, with
// the manifest's dtype and shape ([flat_length]); every tensor the manifest puts there is
// in it; and, for the files this rank checks whole, each tensor's bytes give the
// manifest's FNV-1a checksum. A header that says I32 over an F32 tensor's bytes (same
// size, same checksum) is refused here instead of training at a loss of 1e11.
//
// --resume runs it on every rank before any step (the headers of every file on every
// rank, the checksums of file i on rank i % ranks); --check-checkpoint DIR runs it alone
// and prints what the checkpoint holds.
//
// Test: ctest -R 'checkpoint\.(check|bad_header)'; tests/scripts/untrusted_files.sh (ck_*)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "picotron/comm.h"
#include "runtime/checkpoint/resume.h"

namespace picotron {

struct CheckpointFileReport {
  std::string name;     // rank-00000.safetensors
  int64_t bytes = 0;    // on disk
  int64_t tensors = 0;  // pieces it holds
};

// What a verified checkpoint holds.
struct CheckpointReport {
  std::string path;
  TrainingCounters counters;
  int world_size = 0;
  nlohmann::json config;  // the run's model, schedule and mesh (CheckpointSettings::run, runtime/cli/settings.cpp: run_record)
  std::vector<CheckpointFileReport> files;
  int64_t bytes = 0;  // every file, the manifest included
  bool older_checksums = false;  // FNV-1a with the older offset basis (runtime/checkpoint/safetensors.h)
};

// Checks every file's header against the manifest, and the checksums of the files with
// index % ranks == rank (all of them for ranks = 1). Throws one line: "checkpoint D:
// rank-00001.safetensors: tensor 'k' is I32 in the file's header, F32 in the manifest".
// The files hashed are marked verified in `reader` (their pieces are not hashed again).
CheckpointReport verify_checkpoint(CheckpointReader& reader, int rank = 0, int ranks = 1);

// The report as lines: step, mesh, model, bytes per file.
std::string checkpoint_report_text(const CheckpointReport& report, double seconds);

// --check-checkpoint PATH (a checkpoint, or a --save-dir: its newest): verifies it and
// prints the report, or one "error:" line. Returns the exit code (0, or 2).
int check_checkpoint(const std::string& path, int rank);

// Every rank gets a problem some rank had (its own first), or "" when none had one: so
// each rank can name it, not only the one that found it. Collective over `world`.
std::string problem_of_any_rank(const std::string& mine, Comm& world);

}  // namespace picotron
