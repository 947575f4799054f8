// tests/mpi/flight_cases.cpp — the mistakes a student makes, on two ranks, each recorded by the
// flight recorder and written out, for scripts/hang_report.py to explain (no model: only
// the communications, through the real Comm, recorder and dump wiring of build/train).
//
//   flight_cases pipeline_m DIR   two pipeline stages run the real 1F1B programs
//                                 (pipeline_parallel/p2p_program.h) for different numbers
//                                 of micro-batches: stage 0 for 4, stage 1 for 2; then
//                                 both all-reduce a "gradient norm" over the world
//   flight_cases sends_first DIR  both stages send their [B, S, H] to the other, then
//                                 receive: each send waits for a receive never posted
//   flight_cases skip DIR         three steps of "gradients, then loss" all-reduces over
//                                 dp; rank 1 skips the gradients' all-reduce of step 1
//   flight_cases clean DIR        the same three steps on both ranks, nothing wrong
//   flight_cases cost DIR         (one rank) what one entry costs: issue + waiting +
//                                 completed, 10^6 times, in ns
//   flight_cases mystery DIR      (3 ranks) a ring of three passes blocks to the right; one
//                                 rank's program has a mistake, and the job hangs: the
//                                 flight recorder assignment (docs/assignments/flight_recorder.md)
//   flight_cases diagnosis        prints the student's diagnosis of the mystery, as JSON
//
// Like train.cpp: the recorder comes from FlightDump (runtime/observe/flight_dump.h), a
// CommError unwinds to main, which prints one line and aborts the job (dist.abort_job).
//
// Run:  mpirun -np 2 build/tests/flight_cases pipeline_m /tmp/f --timeout-s 2;
//       scripts/hang_report.py /tmp/f
// Test: ctest -L flight   (tests/cmake/flight_tests.cmake)
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/distributed.h"
#include "runtime/launch/launch_env.h"
#include "picotron/step_place.h"
#include "runtime/observe/flight_recorder.h"
#include "pipeline_parallel/p2p_program.h"
#include "runtime/observe/flight_dump.h"

using namespace picotron;

namespace {

// A stage's program for m micro-batches, each exchange through Comm::batch_p2p with what
// each message carries and its micro-batch and stages, as the pipeline executor says them
// (pipeline_parallel.cpp, Pipeline::exchange).
void run_pipeline(Comm& pp, int m, int64_t elements) {
  const auto program = pipeline_programs(PipelineSchedule::k1F1B, /*P=*/2, m, /*v=*/1)[size_t(pp.rank())];
  for (const PipelineStep& step : program) {
    if (step.exchange.empty()) continue;
    std::vector<P2POp> ops;
    for (const auto& op : step.exchange) {
      const bool activation = op.t.kind == Transfer::kActivation;
      StepPlace place;
      place.micro_batch = op.t.micro, place.from_stage = op.t.from_stage;
      place.to_stage = op.t.from_stage + (activation ? 1 : -1);
      ops.push_back({op.send ? P2POp::kSend : P2POp::kRecv, torch::zeros({elements}), op.t.peer, /*tag=*/0,
                     activation ? "pipeline: an activation" : "pipeline: an activation's gradient", place});
    }
    pp.batch_p2p(ops);
  }
}

// The mystery: three rounds of a ring, each rank passing a block to the next and taking the
// previous rank's, posted together (one batch, as ring attention does). Blocks of 64 KiB, past
// MPI's eager limit. One rank's program has a mistake (the assignment: find it from the
// flight recorder's files alone, docs/assignments/flight_recorder.md, before reading this).
void ring_rounds(Comm& ring, int64_t elements) {
  const int R = ring.size(), r = ring.rank();
  for (int round = 0; round < 3; ++round) {
    auto mine = torch::full({elements}, float(r)), theirs = torch::empty({elements});
    std::vector<P2POp> ops;
    if (round != 1 || r != R - 1) ops.push_back({P2POp::kSend, mine, (r + 1) % R});
    ops.push_back({P2POp::kRecv, theirs, (r + R - 1) % R});
    ring.batch_p2p(ops, carries("a block, one hop to the right"));
  }
}

// The diagnosis of the mystery's hang (the flight recorder assignment): which rank's program
// is wrong, the group, the operation it waits in and the rank it waits for, and the header
// that states the rule it breaks. The grader checks it against the recorder's files.
struct Diagnosis {
  int rank;            // the rank whose program is wrong
  std::string group;   // the group's name in the files ("world", "ring", ...)
  std::string op;      // the operation its program lacks, or has too many of ("send", "recv", "all_reduce", ...)
  int peer;            // for a send or a receive: the other side's world rank (-1 otherwise)
  std::string rule;    // the header that states the rule it breaks ("picotron/comm.h", ...)
};

Diagnosis diagnosis() {
  // BEGIN ASSIGNMENT flight.diagnose
  return {2, "ring", "send", 0, "pipeline_parallel/p2p_program.h"};
  // END ASSIGNMENT
}

// One "step" of data parallelism: the gradients' all-reduce, then the loss's.
void dp_step(Comm& dp, int step, bool skip_gradients) {
  auto grads = torch::ones({4096});                       // [4096] float32
  auto loss = torch::ones({1}, torch::kFloat64);          // [1] float64
  StepPlace place;
  place.micro_batch = step;  // (the recorder names it: "micro-batch <step>")
  PlaceScope at_step(place);
  if (!skip_gradients) dp.all_reduce(grads, ReduceOp::kSum, carries("the gradients"));
  dp.all_reduce(loss, ReduceOp::kAvg, carries("the loss"));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (argc == 2 && std::string(argv[1]) == "diagnosis") {  // the student's answer, for the grader
    const Diagnosis d = diagnosis();
    std::printf("{\"rank\": %d, \"group\": \"%s\", \"op\": \"%s\", \"peer\": %d, \"rule\": \"%s\"}\n", d.rank,
                d.group.c_str(), d.op.c_str(), d.peer, d.rule.c_str());
    return 0;
  }
  if (mode != "pipeline_m" && mode != "sends_first" && mode != "skip" && mode != "clean" && mode != "cost" &&
      mode != "mystery") {
    std::fprintf(stderr, "usage: flight_cases pipeline_m|sends_first|skip|clean|cost|mystery DIR [--timeout-s 2]"
                         " | flight_cases diagnosis\n");
    return 2;
  }
  if (mode == "cost") {  // the recorder alone, as Comm drives it for one synchronous call
    FlightRecorder recorder(0, 1, 4096, 2);
    CommGroup dp;
    dp.id = 0, dp.name = "dp", dp.size = 2, dp.world_ranks = {0, 1};
    recorder.joined(dp);
    auto grads = torch::ones({4096});
    CommEvent e;
    e.kind = "all_reduce";
    e.reduce = "sum";
    e.in_shape = grads.sizes();
    e.elements = grads.numel();
    e.at = CallSite::here();
    const int n = 1000000;
    const auto start = std::chrono::steady_clock::now();
    e.group = 0;
    for (int i = 0; i < n; ++i) {
      e.id = i, e.seq = i + 1;
      recorder.issued(dp, e);
      recorder.waiting(CommOps{i, 1});
      recorder.completed(CommOps{i, 1});
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / n;
    std::printf("flight recorder: %.0f ns per entry (issue + waiting + completed, %d entries, ring of 4096)\n", ns, n);
    return 0;
  }
  FlightSettings settings;
  settings.dir = argv[2];
  settings.dump_at_end = mode == "clean" || mode == "mystery";  // (the ranks that finish write theirs too)
  settings.timeout_s = argc > 4 && !std::strcmp(argv[3], "--timeout-s") ? std::atoi(argv[4]) : 2;
  Distributed dist(detect_launch(process_environment()));
  try {
    torch::set_num_threads(1);
    Comm world = Comm::world(dist, torch::kCPU, std::chrono::seconds(settings.timeout_s));
    FlightDump flight(settings, world);  // as train.cpp: before the groups are split
    Comm pp = world.split(/*color=*/0, /*key=*/world.rank(), "pp");
    Comm dp = world.split(/*color=*/0, /*key=*/world.rank(), "dp");
    const int64_t activation = 2 * 64 * 128;  // [B, S, H] = [2, 64, 128]: 64 KiB, past MPI's eager limit
    if (mode == "pipeline_m") {
      run_pipeline(pp, /*m=*/pp.rank() == 0 ? 4 : 2, activation);
      auto norm = torch::ones({1}, torch::kFloat64);  // [1]
      world.all_reduce(norm, ReduceOp::kSum, carries("the gradient norm"));
    } else if (mode == "mystery") {
      Comm ring = world.split(/*color=*/0, /*key=*/world.rank(), "ring");
      ring_rounds(ring, activation);
    } else if (mode == "sends_first") {
      auto mine = torch::zeros({activation}), theirs = torch::zeros({activation});
      pp.send(mine, 1 - pp.rank(), carries("pipeline: an activation, sent on its own before the receive"));
      pp.recv(theirs, 1 - pp.rank());
    } else {
      for (int step = 0; step < 3; ++step) dp_step(dp, step, mode == "skip" && dp.rank() == 1 && step == 1);
      world.barrier();
    }
  } catch (const std::exception& e) {  // train.cpp's main does the same
    std::string msg = e.what();
    if (msg.rfind("[rank ", 0) == 0) msg = msg.substr(msg.find("] ") + 2);  // Comm errors carry the rank already
    std::cerr << "[rank " << dist.rank() << "] error: " << msg.substr(0, msg.find('\n')) << std::endl;
    dist.abort_job(1);
  }
  return 0;
}
