// pipeline_parallel/pipeline_trace.cpp — --pp-trace: every rank's forward, backward,
// send and receive events gathered on rank 0 and written as one Chrome trace (JSON for
// chrome://tracing or ui.perfetto.dev; scripts/plot_pipeline.py draws it); with --dry-run,
// the schedule's unit-time simulation in the same form. Reporting only: the schedule
// itself is pipeline_parallel.cpp. The file is written by the caller's `write_file` (the
// runtime's: runtime/output/output_file.h, never half a file).
//
// Test: ctest -R pp_trace
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "pipeline_parallel/pipeline_parallel.h"

namespace picotron {

void Pipeline::write_trace(const std::string& path, Comm& world, int64_t steps, const WriteFile& write_file) const {
  const int pp = mesh_.shape().pp, m = int(opts_.grad_acc_steps), v = opts_.virtual_stages;
  char formula_value[32];
  std::snprintf(formula_value, sizeof formula_value, "%.3f", bubble_formula(opts_.schedule, pp, m, v));
  const nlohmann::ordered_json about = {
      {"schedule", schedule_name(opts_.schedule)}, {"pp", pp}, {"virtual_stages", v}, {"grad_acc_steps", m},
      {"steps", steps}, {"bubble_formula", bubble_formula_text(opts_.schedule) + " = " + formula_value}};
  // Every rank's events as rows of 7 numbers, gathered on all ranks (row counts first).
  constexpr int kCols = 7;
  auto rows = torch::zeros({int64_t(trace_.size()), kCols}, torch::kFloat64);
  for (size_t i = 0; i < trace_.size(); ++i) {
    const auto& e = trace_[i];
    const double row[kCols] = {double(e.kind), double(e.micro), double(e.chunk), double(e.step),
                               e.start_us,     e.dur_us,        double(e.peer)};
    for (int j = 0; j < kCols; ++j) rows[int64_t(i)][j] = row[j];
  }
  const auto device = torch::Device(torch::kCPU);  // CPU tensors go over MPI
  auto count = torch::full({1}, int64_t(trace_.size()), torch::TensorOptions().dtype(torch::kInt64).device(device));
  auto counts = torch::empty({world.size()}, count.options());
  world.all_gather(counts, count);
  const int64_t most = counts.max().item<int64_t>();
  auto padded = torch::zeros({most, kCols}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  padded.narrow(0, 0, rows.size(0)).copy_(rows);
  auto all = torch::empty({world.size() * most, kCols}, padded.options());
  world.all_gather(all, padded);
  if (world.rank() != 0) return;

  all = all.cpu();
  counts = counts.cpu();
  const char* names[] = {"F", "B", "W", "send", "recv"};
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  const MeshShape& shape = mesh_.shape();
  for (int r = 0; r < world.size(); ++r) {
    const MeshCoords c = coords_of(shape, r);
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", c.dp}, {"tid", r},
                      {"args", {{"name", "rank " + std::to_string(r) + " (pp " + std::to_string(c.pp) + ", dp " +
                                             std::to_string(c.dp) + ", tp " + std::to_string(c.tp) + ")"}}}});
    for (int64_t i = 0; i < counts[r].item<int64_t>(); ++i) {
      auto e = all[r * most + i];
      const int kind = int(e[0].item<double>());
      nlohmann::ordered_json args = {{"step", int64_t(e[3].item<double>())}, {"micro", int(e[1].item<double>())},
                                     {"rank", r}, {"pp_rank", c.pp}};
      if (kind <= TraceEvent::kWeight) {
        args["chunk"] = int(e[2].item<double>());
      } else {
        args["what"] = e[2].item<double>() == 0 ? "activation" : "gradient";
        args["peer"] = int(e[6].item<double>());
      }
      events.push_back({{"name", names[kind]}, {"cat", kind <= TraceEvent::kWeight ? "compute" : "comm"}, {"ph", "X"},
                        {"pid", c.dp}, {"tid", r}, {"ts", e[4].item<double>()}, {"dur", e[5].item<double>()},
                        {"args", args}});
    }
  }
  nlohmann::ordered_json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", about}};
  write_file("--pp-trace", path, doc.dump() + "\n");
  std::cout << "wrote the pipeline trace to " << path << " (chrome://tracing, ui.perfetto.dev; "
            << "python scripts/plot_pipeline.py " << path << " out.png)" << std::endl;
}

void write_simulated_trace(const std::string& path, PipelineSchedule s, int P, int m, int v, const WriteFile& write_file) {
  const Simulation sim = simulate(s, P, m, v);
  if (!sim.problem.empty()) throw std::runtime_error("--pp-trace: the schedule cannot run: " + sim.problem);
  char formula_value[32];
  std::snprintf(formula_value, sizeof formula_value, "%.3f", bubble_formula(s, P, m, v));
  const nlohmann::ordered_json about = {
      {"schedule", schedule_name(s)}, {"pp", P}, {"virtual_stages", v}, {"grad_acc_steps", m}, {"steps", 1},
      {"simulated", "unit time: F = 1, B = 2 (B = W = 1 where W's exist); 1 unit drawn as 1 ms"},
      {"bubble_formula", bubble_formula_text(s) + " = " + formula_value}};
  const char* names[] = {"F", "B", "W"};
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (int r = 0; r < P; ++r) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", "rank " + std::to_string(r) + " (pp " + std::to_string(r) + ", simulated)"}}}});
    for (const auto& slot : sim.timeline[r])
      events.push_back({{"name", names[slot.action.kind]}, {"cat", "compute"}, {"ph", "X"}, {"pid", 0}, {"tid", r},
                        {"ts", slot.start * 1000.0}, {"dur", slot.cost * 1000.0},
                        {"args", {{"step", 0}, {"micro", slot.action.micro}, {"rank", r}, {"pp_rank", r},
                                  {"chunk", slot.action.chunk}, {"paired", slot.action.paired}}}});
  }
  nlohmann::ordered_json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", about}};
  write_file("--pp-trace", path, doc.dump() + "\n");
  std::cout << "wrote the schedule's unit-time simulation to " << path << " (makespan " << sim.makespan
            << " units; python scripts/plot_pipeline.py " << path << " out.png)" << std::endl;
}

}  // namespace picotron
