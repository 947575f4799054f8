// train.cpp — the one entry point. It reads like the Playbook's recipe:
//
//   flags -> launch (rank, world) -> mesh -> plan (who holds what) -> model (this rank's
//   shards) -> [techniques replace slots] -> init -> optimizer -> data parallelism ->
//   loop { micro-batches: forward, backward ; sync grads ; global norm ; step } ->
//   samples (full weights gathered on rank 0)
//
//   build/train --help                              every flag
//   build/train                                     tiny model, arithmetic data, CPU or GPU
//   build/train --model llama3-8b --dry-run         exact parameter count, nothing allocated
//   mpirun -np 4 build/train --device cpu --dp 4    data parallelism on a laptop
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <map>
#include <thread>


#include "data_parallel/data_parallel.h"
#include "picotron/checkpoint.h"
#include "picotron/comm.h"
#include "picotron/config.h"
#include "picotron/data.h"
#include "picotron/distributed.h"
#include "picotron/generate.h"
#include "picotron/init.h"
#include "picotron/mesh.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/memory_estimate.h"
#include "picotron/hf.h"
#include "picotron/report.h"
#include "picotron/resume.h"
#include "picotron/shard.h"
#include "picotron/startup.h"
#include "picotron/utils.h"
#include "pipeline_parallel/pipeline_parallel.h"
#include "tensor_parallel/tensor_parallel.h"
#include "zero/zero.h"
#include "context_parallel/context_parallel.h"
#include "kernels/kernels.h"
#include "picotron/recompute.h"

using namespace picotron;

namespace {

// What the rank at `here` holds: every parameter's shard record. A pure function of the
// config and the mesh coordinates, so any rank can compute any other rank's plan (the
// gather for sampling and --save-params does). Each technique adds its line here as it
// lands: tensor parallelism splits the projections over tp, pipeline parallelism keeps
// a stage's layers, ZeRO-3 shards over dp.
ShardPlan plan_for(const TrainConfig& cfg, const MeshCoords& here) {
  ShardPlan plan = replicated_plan(cfg.llama);  // data parallelism: everything, everywhere
  if (cfg.tp > 1) shard_for_tensor_parallel(plan, cfg.llama, here.tp, cfg.tp);  // projections, vocabulary over tp
  if (cfg.pp > 1) keep_pipeline_stage(plan, cfg.llama, here.pp, cfg.pp, cfg.pp_virtual_stages);  // this stage's layers
  return plan;
}

int run(TrainConfig cfg, std::shared_ptr<TokenSource> data, Distributed& dist) {
  const int rank = dist.rank();
  count_cpu_tensor_memory();  // "mem" and --memory-trace: exact bytes of CPU tensors from here on
  // ---- device, precision, threads ---------------------------------------------------
  if (cfg.device == "auto") cfg.device = torch::cuda::is_available() ? "cuda" : "cpu";
  if (!cfg.dtype_given) cfg.dtype = cfg.device == "cuda" ? Precision::kBF16 : Precision::kFP32;
  const torch::Device device = cfg.device == "cuda" ? torch::Device(torch::kCUDA, dist.select_cuda_device())
                                                    : torch::Device(torch::kCPU);
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(cfg.threads > 0 ? cfg.threads : std::max(1, cores / dist.local_world_size()));
  const auto dtype = scalar_type(cfg.dtype);
  if (cfg.pp > 1 && device.is_cuda())  // see pipeline_parallel.h: NCCL would need grouped send/recv
    throw std::runtime_error("--pp " + std::to_string(cfg.pp) + " runs on --device cpu only (multi-GPU pipelines are "
                             "not implemented: one GPU is all this project can test on)");

  // ---- mesh -----------------------------------------------------------------------
  // Building the communicators waits for every rank (MPI_Comm_dup/split, NCCL init), with
  // no timeout of its own: bounded here. From then on every collective is (Comm).
  RendezvousDeadline setup(rank, "building the communicators (the world, then the mesh's groups)",
                           std::chrono::seconds(cfg.timeout_s));
  Comm world = Comm::world(dist, device, std::chrono::seconds(cfg.timeout_s));
  const MeshShape shape{cfg.dp, cfg.pp, cfg.cp, cfg.tp};
  Mesh mesh(world, shape);
  setup.disarm();
  const PlanOf plan_of = [&](const MeshCoords& c) { return plan_for(cfg, c); };
  print0(rank, model_summary(cfg));
  print0(rank, "launch: " + std::string(launcher_name(dist.info().launcher)) + ", " + std::to_string(dist.world_size()) +
                   " process(es), device " + device.str() + ", " + precision_name(cfg.dtype));
  print0(rank, describe_mesh(shape));
  print0(rank, plan_summary(cfg, shape, plan_of));
  const PipelineSchedule schedule = parse_schedule(cfg.pp_schedule);
  if (cfg.pp > 1) print0(rank, pipeline_summary(cfg.llama, schedule, cfg.pp, cfg.pp_virtual_stages));

  // ---- model: only this rank's shards, on its device and dtype -----------------------
  const ShardPlan plan = plan_of(mesh.coords());
  LlamaForCausalLM model(cfg.llama, plan, torch::TensorOptions().device(device).dtype(dtype));
  // Techniques replace the model's slots here, one line each (see model.h).
  if (cfg.tp > 1) apply_tensor_parallel(model, plan, mesh.tp(), cfg.sp);  // f/g around blocks, vocab-parallel embedding + loss
  const CpLayout cp_layout = parse_cp_layout(cfg.cp_layout);
  const std::vector<int64_t> my_tokens = cp_positions(cfg.seq_len, cfg.cp, mesh.coords().cp, cp_layout);  // [S/cp]
  if (cfg.cp > 1) {
    apply_context_parallel(model, mesh, cp_layout);  // attention: ring over the cp group
    print0(rank, cp_summary(cp_layout, cfg.cp, cfg.seq_len));
  }
  // Fused CUDA kernels (kernels/README.md): norms, RoPE, SwiGLU, and the attention core and
  // the loss where no technique replaced them. auto: fused on CUDA, except in fp64.
  const bool fused = cfg.kernels == "fused" ||
                     (cfg.kernels == "auto" && device.is_cuda() && kernels::fused_built() && dtype != torch::kFloat64);
  if (fused) print0(rank, kernels::use_fused_kernels(*model, dtype));
  // Recomputation wraps what the techniques installed (the ring attention core included);
  // ZeRO-3, attached below, gathers around it.
  apply_recompute(model, parse_recompute(cfg.recompute));
  // Then every parameter, whichever module now holds it, gets its slice of the full init.
  init_parameters(*model, plan, cfg.seed, cfg.init_std);
  if (!cfg.init_from.empty()) {  // a Hugging Face folder's weights: each rank its slices (picotron/hf.h)
    load_hf_weights(cfg.init_from, *model, plan);
    print0(rank, "initialised from " + cfg.init_from + " (Hugging Face weights)");
  }

  // ---- optimizer and data parallelism (over cp x dp: every rank there sees other tokens)
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
  const AdamWOptions adam{cfg.beta1, cfg.beta2, cfg.adam_eps, cfg.weight_decay, /*fused=*/fused};
  std::unique_ptr<AdamW> adamw;                 // --zero 0: every rank keeps the whole optimizer
  std::unique_ptr<DataParallel> data_parallel;  //   and all-reduces the gradients
  std::unique_ptr<ZeroOptimizer> zero;          // --zero 1: master weights and moments sharded over cp x dp,
                                                // --zero 2: the gradients too, --zero 3: the parameters too
  if (cfg.zero == 0) {
    adamw = std::make_unique<AdamW>(named, adam, plan);
    data_parallel = std::make_unique<DataParallel>(mesh.cp_dp(), adamw->params(), cfg.dp_mode, cfg.dp_bucket_mb);
  } else {
    zero = std::make_unique<ZeroOptimizer>(mesh.cp_dp(), named, adam, plan, mesh.coords(), cfg.zero, cfg.dp_bucket_mb,
                                           cfg.zero_offload);
    if (cfg.zero == 3) zero->attach(model);  // each layer's parameters gathered as it runs, released after
    print0(rank, zero->summary());
  }
  // Every parameter's name, tensor, full main gradient and shard record, whichever optimizer.
  std::vector<TrainableParam>& grads = zero ? zero->params() : adamw->params();
  const auto accumulate_grads = [&] { zero ? zero->accumulate_grads() : adamw->accumulate_grads(); };
  const auto prepare_backward = [&](bool sync) {
    if (data_parallel) data_parallel->prepare_backward(sync);
    if (zero) zero->prepare_backward();
  };
  LossScaler scaler(cfg.dtype == Precision::kFP16);
  std::unique_ptr<Pipeline> pipeline;  // pp > 1: the micro-batches run through the stages in the schedule's order
  if (cfg.pp > 1)
    pipeline = std::make_unique<Pipeline>(
        model, mesh,
        Pipeline::Options{schedule, cfg.pp_virtual_stages, cfg.grad_acc_steps, cfg.micro_batch_size,
                          cfg.seq_len / cfg.cp, cfg.sp, !cfg.pp_trace.empty(), torch::tensor(my_tokens, torch::kInt64)},
        torch::TensorOptions().device(device).dtype(dtype));

  BatchLoader loader(data, cfg.seed, cfg.seq_len, cfg.micro_batch_size, cfg.grad_acc_steps, mesh.shape().dp,
                     mesh.coords().dp);
  if (cfg.cp > 1)  // this cp rank's tokens of every sequence (their targets and RoPE positions follow)
    loader.keep_positions(my_tokens);
  print0(rank, "data: " + std::string(cfg.data == "synthetic" ? "synthetic" : cfg.data) + "; global batch " +
                   std::to_string(loader.global_batch_rows()) + " x " + std::to_string(cfg.seq_len) + " = " +
                   with_commas(loader.tokens_per_step()) + " tokens/step (micro-batch " +
                   std::to_string(cfg.micro_batch_size) + " x grad-acc " + std::to_string(cfg.grad_acc_steps) +
                   " x dp " + std::to_string(cfg.dp) + "); data parallelism: " + dp_mode_name(cfg.dp_mode));
  MetricsWriter metrics(rank == 0 ? cfg.metrics_file : "");
  MemoryTraceWriter memory_trace(rank == 0 ? cfg.memory_trace : "");
  const Timer run_clock;
  const double peak_flops = device_peak_flops(device) * dist.world_size();
  const double flops_tok = flops_per_token(cfg.llama, cfg.seq_len);

  // ---- checkpoints (picotron/resume.h): resume on any mesh, save what this rank owns --
  const int64_t end_step = cfg.stop_at_step > 0 ? cfg.stop_at_step : cfg.steps;
  int64_t start_step = 0;
  if (!cfg.resume.empty()) start_step = resume_run(cfg, end_step, adamw.get(), zero.get(), scaler, world, dist);
  const std::vector<StatePiece> owned = owned_state(adamw.get(), zero.get(), mesh.coords());

  // ---- the loop ---------------------------------------------------------------------
  mesh.reset_ledgers();        // --comm-report counts the training steps only
  int bad_steps = 0;  // steps with a non-finite loss or grad norm (--max-bad-steps)
  int64_t last_good_step = 0;
  double last_good_loss = 0;
  for (int64_t step = start_step; step < end_step; ++step) {
    Timer timer;
    reset_peak_memory(device);  // "mem": this step's peak (tensor memory; on the CPU counted exactly)
    const auto trace = [&](const char* phase, int64_t micro) {  // --memory-trace
      if (memory_trace.enabled())
        memory_trace.write(step + 1, phase, micro, run_clock.seconds(), current_memory_bytes(device),
                           peak_memory_bytes(device));
    };
    zero ? zero->zero_main_grads() : adamw->zero_main_grads();
    trace("start", -1);
    auto loss_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    if (pipeline) {  // the schedule decides the order; data parallelism syncs after the last backward
      loss_sum = pipeline->run_step(step, loader, scaler.scale(),
                                    {[&] { prepare_backward(/*sync=*/false); }, accumulate_grads});
      trace("pipeline", -1);
    } else {
      for (int64_t micro = 0; micro < cfg.grad_acc_steps; ++micro) {
        const Batch batch = loader.micro_batch(step, micro);
        // Only the last micro-batch's backward communicates (no-sync for the others).
        prepare_backward(/*sync=*/micro == cfg.grad_acc_steps - 1);
        auto loss = model->loss(batch.inputs.to(device), batch.targets.to(device), batch.positions) /
                    double(cfg.grad_acc_steps);
        trace("forward", micro);             // the activations kept for backward are all alive here
        (loss * scaler.scale()).backward();  // [B, S] -> grads (fp32/fp64: straight into the main grads)
        accumulate_grads();                  // main_grad += grad, for bf16/fp16 grads no hook took
        loss_sum += loss.detach().to(torch::kFloat64);
        trace("backward", micro);
      }
    }
    if (data_parallel) data_parallel->finish_gradient_sync();  // main grads now hold the cp x dp average
    if (pipeline) pipeline->sync_tied_embedding(grads);               // lookup + head parts of a tied embedding
    if (cfg.sp) sync_sequence_parallel_grads(grads, mesh.tp());       // norm gains saw S/tp tokens
    if (zero) zero->reduce_scatter_grads();  // ZeRO: the cp x dp average of this rank's slice only
    trace("sync", -1);
    // One norm over every shard, replicas counted once; it also decides an fp16 overflow,
    // identically on every rank. Clipping and unscaling are one factor inside the update.
    const double norm =
        (zero ? zero->grad_norm(mesh.world()) : global_grad_norm(grads, mesh.world(), mesh.coords())) / scaler.scale();
    const bool finite = std::isfinite(norm);
    const double lr = lr_at(step, cfg);
    const double grad_scale = clip_coefficient(norm, cfg.grad_clip) / scaler.scale();
    if (finite) zero ? zero->step(lr, grad_scale) : adamw->step(lr, grad_scale);
    scaler.update(finite);
    trace("optimizer", -1);
    mesh.cp_dp().all_reduce_async(loss_sum, ReduceOp::kAvg).wait();  // loss of the whole global batch

    StepStats stats;
    stats.step = step + 1;
    stats.steps = cfg.steps;
    stats.loss = loss_sum.item<double>();  // syncs the device: the timer is honest
    stats.tokens_per_s = double(loader.tokens_per_step()) / timer.seconds();
    stats.lr = lr;
    stats.grad_norm = norm;
    stats.mfu = peak_flops > 0 ? flops_tok * stats.tokens_per_s / peak_flops : -1.0;
    stats.peak_mem_bytes = peak_memory_bytes(device);
    stats.skipped = !finite;
    if (rank == 0 && should_log(stats.step, cfg.steps, cfg.log_every)) std::cout << step_line(stats) << std::endl;
    metrics.write(stats);
    // Divergence: the loss and the norm are global, so every rank decides alike.
    const bool bad = !std::isfinite(stats.loss) || (!finite && cfg.dtype != Precision::kFP16);
    if (bad) {
      ++bad_steps;
      if (rank == 0 && !should_log(stats.step, cfg.steps, cfg.log_every)) std::cout << step_line(stats) << std::endl;
      print0(rank, "step " + std::to_string(step + 1) + ": non-finite loss or gradient norm (bad step " +
                       std::to_string(bad_steps) + " of --max-bad-steps " + std::to_string(cfg.max_bad_steps) + ")");
      if (bad_steps >= cfg.max_bad_steps) {
        if (rank == 0)
          report_error(rank, "the run diverged: " + std::to_string(bad_steps) + " steps had a non-finite loss or "
                       "gradient norm (--max-bad-steps " + std::to_string(cfg.max_bad_steps) + "); the last finite loss " +
                       (last_good_step > 0 ? "was " + std::to_string(last_good_loss) + " at step " +
                                                 std::to_string(last_good_step) : "never came") +
                       ". Lower --lr (or --init-std), or raise --warmup-steps");
        metrics.finish();  // what was written stays: valid JSON lines
        memory_trace.finish();
        return 3;
      }
    } else {
      last_good_step = step + 1, last_good_loss = stats.loss;
    }
    if (!cfg.save_dir.empty() && ((cfg.save_every > 0 && (step + 1) % cfg.save_every == 0) || step + 1 == end_step)) {
      const Timer save_clock;
      const TrainingCounters counters{step + 1, zero ? zero->steps_taken() : adamw->steps_taken(), scaler.scale(),
                                      scaler.clean_steps()};
      const std::string where = save_checkpoint(cfg.save_dir, cfg, counters, owned, world);
      print0(rank, "saved checkpoint " + where + " (" + human_bytes(double(directory_bytes(where))) + ", " +
                       std::to_string(world.size()) + " file(s), " + seconds_text(save_clock.seconds()) + ")");
    }
  }
  metrics.finish();
  memory_trace.finish();
  if (cfg.comm_report) print0(rank, mesh.comm_report(cfg.steps, {pipeline ? &pipeline->embedding_group() : nullptr}));
  if (pipeline && !cfg.pp_trace.empty()) {
    char formula_value[32];
    std::snprintf(formula_value, sizeof formula_value, "%.3f",
                  bubble_formula(schedule, cfg.pp, int(cfg.grad_acc_steps), cfg.pp_virtual_stages));
    pipeline->write_trace(cfg.pp_trace, world,
                          {{"schedule", cfg.pp_schedule}, {"pp", cfg.pp}, {"virtual_stages", cfg.pp_virtual_stages},
                           {"grad_acc_steps", cfg.grad_acc_steps}, {"steps", cfg.steps},
                           {"bubble_formula", bubble_formula_text(schedule) + " = " + formula_value}});
    print0(rank, "wrote the pipeline trace to " + cfg.pp_trace + " (chrome://tracing, ui.perfetto.dev; "
                 "python scripts/plot_pipeline.py " + cfg.pp_trace + " out.png)");
  }

  // ---- results: full tensors reassembled on rank 0 from every rank's shards ----------
  std::map<std::string, torch::Tensor> weights, masters;
  for (auto& p : grads) {
    weights[p.name] = p.param;
    if (adamw) masters[p.name] = p.master;
  }
  if (!cfg.save_params.empty() || !cfg.export_hf.empty()) {  // fp32 master weights (fp64 in fp64 runs)
    if (zero) masters = zero->full_masters();  // ZeRO: the slices, all-gathered over cp x dp
    const auto full = gather_full_tensors(masters, cfg.llama, shape, plan_of,
                                          zero ? zero->state_dtype() : grads.front().master.scalar_type(), world);
    if (rank == 0 && !cfg.save_params.empty()) {
      save_tensors(cfg.save_params, full);
      print0(rank, "saved parameters to " + cfg.save_params);
    }
    if (rank == 0 && !cfg.export_hf.empty()) {
      export_hf(cfg.export_hf, cfg.llama, full);
      print0(rank, "exported a Hugging Face folder to " + cfg.export_hf + " (config.json, model.safetensors)");
    }
  }
  const bool uses_whole_model = prints_samples(cfg) || !cfg.eval.empty() || !cfg.prompt_ids.empty();
  if (uses_whole_model) {  // a whole model on rank 0, whatever the mesh trained
    if (cfg.zero == 3) weights = zero->full_parameters();  // ZeRO-3 keeps only slices: gather every unit
    const auto full = gather_full_tensors(weights, cfg.llama, shape, plan_of, dtype, world);
    if (rank == 0) {
      LlamaForCausalLM whole(cfg.llama, replicated_plan(cfg.llama), torch::TensorOptions().device(device).dtype(dtype));
      load_parameters(*whole, full);
      if (!cfg.eval.empty()) print_eval(whole, cfg.eval, cfg.eval_logits);
      if (!cfg.prompt_ids.empty()) print_continuation(whole, cfg.prompt_ids, cfg.generate);
      else if (prints_samples(cfg)) print_samples(whole, cfg, loader);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A write past a file-size limit (ulimit -f) must fail with EFBIG, which the output
  // files report as one line, instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  const ParsedArgs args = parse_args(argc, argv);
  if (!args.config && args.exit_code == 0) {  // --help
    std::cout << args.message << std::endl;
    return 0;
  }
  LaunchInfo launch;
  try {
    launch = detect_launch(process_environment());
  } catch (const std::exception& e) {
    report_error(-1, e.what());  // the launch environment itself is broken: no rank to tell
    return 2;
  }
  // Setup problems (flags, mesh, device, data files): every rank sees the same ones.
  std::vector<std::string> problems;
  std::shared_ptr<TokenSource> data;
  std::optional<TrainConfig> config = args.config;
  if (!config) {
    problems.push_back(args.message.substr(args.message.rfind("error: ", 0) == 0 ? 7 : 0));
  } else {
    TrainConfig& cfg = *config;
    if (!cfg.init_from.empty()) problems = apply_hf_config(cfg);  // the shape comes from its config.json
    if (problems.empty()) problems = validate(cfg, cfg.dry_run ? cfg.dp * cfg.pp * cfg.cp * cfg.tp : launch.world_size);
    if (problems.empty() && cfg.dry_run) {  // no launch, no allocation: the summary is pure arithmetic
      if (launch.rank == 0) {
        const MeshShape shape{cfg.dp, cfg.pp, cfg.cp, cfg.tp};
        std::cout << model_summary(cfg) << "\n"
                  << plan_summary(cfg, shape, [&](const MeshCoords& c) { return plan_for(cfg, c); }) << std::endl;
        std::cout << memory_summary(cfg, [&](const MeshCoords& c) { return plan_for(cfg, c); }) << std::endl;
        if (cfg.pp > 1)
          std::cout << pipeline_summary(cfg.llama, parse_schedule(cfg.pp_schedule), cfg.pp, cfg.pp_virtual_stages)
                    << std::endl;
      }
      return 0;
    }
    if (problems.empty()) problems = output_problems(cfg);  // every output writable: now, not after the run
    if (problems.empty()) problems = machine_problems(cfg);  // a GPU, the CUDA kernels, where the flags need them
    if (problems.empty())  // the memory this rank will need, before allocating any of it
      if (auto p = memory_problem(cfg, launch, [&](const MeshCoords& c) { return plan_for(cfg, c); }); !p.empty())
        problems.push_back(p);
    if (problems.empty()) {
      try {
        data = open_data(cfg.data, cfg.llama.vocab_size, cfg.seq_len);
      } catch (const std::exception& e) {
        problems.push_back(e.what());
      }
    }
  }
  for (const auto& p : problems) report_error(launch.rank, p);
  if (problems.empty() || launch.world_size > 1) {
    std::unique_ptr<Distributed> dist;
    try {
      // Bounded by --timeout-s (the default when the flags did not parse): a rank that
      // stopped before MPI_Init must not hang the others there.
      dist = std::make_unique<Distributed>(launch, std::chrono::seconds(config ? config->timeout_s : TrainConfig{}.timeout_s));
    } catch (const std::exception& e) {
      report_error(launch.rank, e.what());
      return 2;
    }
    // The ranks must have been given the same configuration (one bounded collective).
    if (auto mismatch = config_mismatch(config, launch, *dist); !mismatch.empty()) {
      report_error(launch.rank, mismatch);
      problems.push_back(mismatch);
    }
    // Each rank has printed its problems; leave together so that none is killed first.
    if (!problems.empty()) dist->exit_together(2, std::chrono::seconds(30));
    try {
      return run(*config, data, *dist);
    } catch (const std::exception& e) {
      std::string msg = out_of_memory_message(e.what(), *config);
      if (msg.empty()) msg = e.what();
      msg = msg.substr(0, msg.find('\n'));
      if (msg.rfind("[rank ", 0) == 0) msg = msg.substr(msg.find("] ") + 2);  // Comm errors carry the rank already
      report_error(dist->rank(), msg);
      dist->abort_job(1);  // a rank that fails takes the job down: nobody waits forever
    }
  }
  return 2;
}
