// runtime/preflight/preflight.cpp — see preflight.h: main()'s sequence before the run.
#include "runtime/preflight/preflight.h"

#include <csignal>
#include <iostream>

#include "pipeline_parallel/p2p_program.h"
#include "pipeline_parallel/pipeline_parallel.h"
#include "runtime/checkpoint/checkpoint_check.h"
#include "runtime/cli/flags.h"
#include "runtime/launch/job_exit.h"
#include "runtime/launch/launch_env.h"
#include "runtime/observe/holdings.h"
#include "runtime/observe/report.h"
#include "runtime/preflight/run_dir.h"
#include "runtime/output/output_file.h"
#include "runtime/output/print0.h"
#include "runtime/planner/memory_estimate.h"
#include "runtime/preflight/resolve.h"

namespace picotron {

namespace {

// --dry-run: no launch, no allocation; the summaries are pure arithmetic (rank 0 prints).
int dry_run(const TrainConfig& cfg, int rank, const ShardPlanOf& shard_plan_of) {
  if (rank != 0) return 0;
  const MeshShape shape{cfg.dp, cfg.pp, cfg.cp, cfg.tp};
  std::cout << model_summary(cfg) << "\n" << plan_summary(cfg, shape, shard_plan_of) << "\n"
            << holdings_summary(cfg, shape, shard_plan_of) << std::endl;
  std::cout << memory_summary(cfg, shard_plan_of) << std::endl;
  if (cfg.pp > 1) {
    const PipelineSchedule s = parse_schedule(cfg.pp_schedule);
    std::cout << pipeline_summary(cfg.llama, s, cfg.pp, cfg.pp_virtual_stages) << "\n"
              << pipeline_programs_text(s, cfg.pp, int(cfg.grad_acc_steps), cfg.pp_virtual_stages) << std::endl;
    if (!cfg.pp_trace.empty()) try {  // the schedule's own picture, in unit time (pipeline_trace.cpp)
        write_simulated_trace(cfg.pp_trace, s, cfg.pp, int(cfg.grad_acc_steps), cfg.pp_virtual_stages, write_file);
      } catch (const std::exception& e) {
        report_error(rank, e.what());
        return 1;
      }
  }
  return 0;
}

}  // namespace

Launched preflight(int argc, char** argv, const ShardPlanFor& shard_plan_for) {
  Launched ready;
  // A write past a file-size limit (ulimit -f) must fail with EFBIG, which the output
  // files report as one line, instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  const ParsedArgs args = parse_args(argc, argv);
  if (!args.config && args.exit_code == 0) {  // --help
    std::cout << args.message << std::endl;
    ready.exit_code = 0;
    return ready;
  }
  LaunchInfo launch;
  try {
    launch = detect_launch(process_environment());
  } catch (const std::exception& e) {
    report_error(-1, e.what());  // the launch environment itself is broken: no rank to tell
    ready.exit_code = 2;
    return ready;
  }
  if (args.config && !args.config->check_checkpoint.empty()) {  // verify a checkpoint, print what it holds, exit
    ready.exit_code = check_checkpoint(args.config->check_checkpoint, launch.rank);  // (../checkpoint/checkpoint_check.h)
    return ready;
  }
  // Everything that can be wrong before any rank communicates (resolve.h, startup.h):
  // every rank finds the same problems and prints them.
  std::optional<RunConfig> config = args.config;
  std::vector<std::string> problems;
  std::string run_dir_problem;  // --run-dir: the outputs not given go under it (runtime/preflight/run_dir.h)
  if (config && !config->run_dir.empty()) {
    apply_run_dir(*config, argc, argv);
    run_dir_problem = prepare_run_dir(config->run_dir);
  }
  if (!config) {  // flags that did not parse
    problems = {args.message.substr(args.message.rfind("error: ", 0) == 0 ? 7 : 0)};
  } else {  // config.json and the tokenizer's vocabulary applied, then the rules between the flags
    const ResolvedConfig resolved = resolve_config(*config);
    problems = resolved.problems.empty() ? config_problems(*config, launch) : resolved.problems;
    for (const auto& change : resolved.changes) print0(launch.rank, "config: " + change);
  }
  if (!run_dir_problem.empty()) problems = {run_dir_problem};  // (its files' own problems follow from it)
  const ShardPlanOf shard_plan_of = [&](const MeshCoords& c) { return shard_plan_for(*config, c); };
  if (problems.empty() && config->dry_run) {
    ready.exit_code = dry_run(*config, launch.rank, shard_plan_of);
    return ready;
  }
  if (problems.empty() && config->planner.search) {  // --plan: the layouts searched, nothing launched (rank 0 prints)
    if (launch.rank == 0) std::cout << layout_search_text(*config, shard_plan_for) << std::endl;
    ready.exit_code = 0;
    return ready;
  }
  if (problems.empty()) problems = run_problems(*config, launch, shard_plan_of, ready.data);  // opens --data, --val-data
  if (problems.empty())  // --device auto and the --dtype default, for the run (the launch line shows them)
    for (const auto& change : resolve_device(*config)) print0(launch.rank, "config: " + change);
  for (const auto& p : problems) report_error(launch.rank, p);
  ready.exit_code = 2;
  if (!problems.empty() && launch.world_size == 1) return ready;
  try {
    // Bounded by --timeout-s (the default when the flags did not parse): a rank that
    // stopped before MPI_Init must not hang the others there.
    ready.dist = std::make_unique<Distributed>(launch, std::chrono::seconds(config ? config->timeout_s : TrainConfig{}.timeout_s));
  } catch (const std::exception& e) {
    report_error(launch.rank, e.what());
    return ready;
  }
  // The ranks must have been given the same configuration (one bounded collective).
  if (auto mismatch = config_mismatch(config, launch, *ready.dist); !mismatch.empty()) {
    report_error(launch.rank, mismatch);
    problems.push_back(mismatch);
  }
  // Each rank has printed its problems; leave together so that none is killed first.
  if (!problems.empty()) exit_together(*ready.dist, 2, std::chrono::seconds(30));
  ready.config = *config;
  ready.exit_code.reset();  // go
  return ready;
}

int run_or_abort(const Launched& ready, const std::function<int()>& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    std::string msg = out_of_memory_message(e.what(), ready.config);
    if (msg.empty()) msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    if (msg.rfind("[rank ", 0) == 0) msg = msg.substr(msg.find("] ") + 2);  // Comm errors carry the rank already
    report_error(ready.dist->rank(), msg);
    ready.dist->abort_job(1);  // a rank that fails takes the job down: nobody waits forever
  }
}

}  // namespace picotron
