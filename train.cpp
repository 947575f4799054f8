// train.cpp — the one entry point. It reads like the Playbook's recipe:
//
//   flags -> launch (rank, world) -> mesh -> plan (who holds what) -> model (this rank's
//   shards) -> techniques (each replaces the model's slots, one line each) -> init ->
//   optimizer (AdamW + data parallelism, or ZeRO: one interface) ->
//   loop { micro-batches: forward, backward ; sync grads ; global norm ; step } ->
//   samples (full weights gathered on rank 0)
//
// What keeps a run safe (flag checks, start-up checks, checkpoints, the step line and
// its files, divergence) is one call each into runtime/.
//
//   build/train --help                              every flag
//   build/train                                     tiny model, arithmetic data, CPU or GPU
//   build/train --model llama3-8b --dry-run         exact parameter count, nothing allocated
//   mpirun -np 4 build/train --device cpu --dp 4    data parallelism on a laptop
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <iostream>
#include <thread>

// the step
#include "picotron/comm.h"
#include "picotron/config.h"
#include "picotron/data.h"
#include "picotron/init.h"
#include "picotron/mesh.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/recompute.h"
#include "picotron/shard.h"
#include "picotron/utils.h"
// the techniques
#include "context_parallel/context_parallel.h"
#include "data_parallel/data_parallel.h"
#include "kernels/kernels.h"
#include "expert_parallel/expert_parallel.h"
#include "pipeline_parallel/pipeline_parallel.h"
#include "tensor_parallel/tensor_parallel.h"
#include "zero/zero.h"
// the runtime that keeps it safe
#include "runtime/checkpoint.h"
#include "picotron/distributed.h"
#include "runtime/explain.h"
#include "runtime/flags.h"
#include "runtime/generate.h"
#include "runtime/hf.h"
#include "runtime/memory_estimate.h"
#include "runtime/plan.h"
#include "runtime/profile.h"
#include "runtime/holdings.h"
#include "runtime/report.h"
#include "runtime/resume.h"
#include "runtime/startup.h"
#include "runtime/validation.h"

using namespace picotron;

namespace {

// What the rank at `here` holds: every parameter's shard record. A pure function of the
// config and the mesh coordinates, so any rank can compute any other rank's plan (the
// gather for sampling and --save-params does). Each technique that cuts parameters adds
// its line: tensor parallelism splits the projections over tp, pipeline parallelism keeps
// a stage's layers. (ZeRO then slices what this plan holds over cp x dp, in zero/.)
ShardPlan plan_for(const TrainConfig& cfg, const MeshCoords& here) {
  ShardPlan plan = replicated_plan(cfg.llama);  // data parallelism: everything, everywhere
  if (cfg.tp > 1) shard_for_tensor_parallel(plan, cfg.llama, here.tp, cfg.tp);  // projections, vocabulary over tp
  if (cfg.pp > 1) keep_pipeline_stage(plan, cfg.llama, here.pp, cfg.pp, cfg.pp_virtual_stages);  // this stage's layers
  if (cfg.ep > 1) keep_local_experts(plan, cfg.llama, here.dp % cfg.ep, cfg.ep);  // this ep rank's experts
  return plan;
}

// The optimizer of this run, behind one interface (picotron/optim.h): --zero 0 keeps the
// whole AdamW state on every rank and all-reduces the gradients over cp x dp
// (data_parallel/); --zero 1/2/3 keeps a 1/(cp x dp) slice of the state, the gradients,
// the parameters (zero/).
// With expert parallelism ZeRO slices the experts over their own replica group
// (DenseAndExperts, expert_parallel/).
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& cfg, LlamaForCausalLM& model, const ShardPlan& plan,
                                          Mesh& mesh, ExpertParallel* experts, bool fused_kernels) {
  std::vector<std::pair<std::string, torch::Tensor>> named, dense, routed;
  for (auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
  AdamWOptions adam{cfg.beta1, cfg.beta2, cfg.adam_eps, cfg.weight_decay, /*fused_step=*/{}};
  const auto zero_over = [&](Comm& group, const std::vector<std::pair<std::string, torch::Tensor>>& these) {
    return make_zero_optimizer(cfg.zero, group, these, adam, plan, mesh.coords(), cfg.dp_bucket_mb, cfg.zero_offload,
                               model);
  };
  if (cfg.zero > 0 && experts) {
    for (auto& item : named) (plan.at(item.first).dp_stride > 1 ? routed : dense).push_back(item);
    return std::make_unique<DenseAndExperts>(zero_over(mesh.cp_dp(), dense), zero_over(experts->replica_group(), routed),
                                             cfg.ep);
  }
  if (cfg.zero > 0) return zero_over(mesh.cp_dp(), named);
  if (fused_kernels) kernels::use_fused_adamw(adam);  // one multi-tensor launch (kernels/adamw.cu)
  auto adamw = std::make_unique<AdamW>(named, adam, plan);
  adamw->sync_gradients_with(std::make_unique<DataParallel>(mesh.cp_dp(), adamw->params(), cfg.dp_mode, cfg.dp_bucket_mb));
  return adamw;
}

int run(TrainConfig cfg, const DataSources& sources, Distributed& dist) {
  const std::shared_ptr<TokenSource>& data = sources.train;
  const int rank = dist.rank();
  wait_for_debugger(cfg, rank);  // --wait-for-debugger: a rank's pid printed, and a pause until gdb attaches
  count_cpu_tensor_memory();  // "mem" and --memory-trace: exact bytes of CPU tensors from here on
  const torch::Device device = choose_device(cfg, dist);  // --device auto, the --dtype default, threads per rank
  const auto dtype = scalar_type(cfg.dtype);

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
  Explainer explain(cfg, mesh, plan_of);  // --explain: the first step narrated, rank by rank
  print0(rank, model_summary(cfg));
  print0(rank, "launch: " + std::string(launcher_name(dist.info().launcher)) + ", " + std::to_string(dist.world_size()) +
                   " process(es), device " + device.str() + ", " + precision_name(cfg.dtype));
  print0(rank, describe_mesh(shape));
  print0(rank, plan_summary(cfg, shape, plan_of));
  print0(rank, holdings_summary(cfg, shape, plan_of));
  const PipelineSchedule schedule = parse_schedule(cfg.pp_schedule);
  if (cfg.pp > 1) print0(rank, pipeline_summary(cfg.llama, schedule, cfg.pp, cfg.pp_virtual_stages));

  // ---- model: only this rank's shards, on its device and dtype -----------------------
  const ShardPlan plan = plan_of(mesh.coords());
  LlamaForCausalLM model(cfg.llama, plan, torch::TensorOptions().device(device).dtype(dtype));
  // Techniques replace the model's slots here, one line each (see model.h).
  if (cfg.tp > 1) apply_tensor_parallel(model, plan, mesh.tp(), cfg.sp);  // f/g around blocks, vocab-parallel embedding + loss
  std::unique_ptr<ExpertParallel> experts;  // the MoE layers' tokens to their experts and back, by all-to-all
  if (cfg.ep > 1) experts = std::make_unique<ExpertParallel>(model, mesh.cp_dp(), cfg.ep, cfg.cp);
  if (cfg.llama.is_moe() && (cfg.cp > 1 || cfg.sp))  // the balancing statistics of whole sequences
    model->router_log->sum_over_ranks = router_stats_sum(cfg.cp > 1 ? &mesh.cp() : nullptr, cfg.sp ? &mesh.tp() : nullptr);
  const CpLayout cp_layout = parse_cp_layout(cfg.cp_layout);
  const std::vector<int64_t> my_tokens = cp_positions(cfg.seq_len, cfg.cp, mesh.coords().cp, cp_layout);  // [S/cp]
  if (cfg.cp > 1) {
    apply_context_parallel(model, mesh, cp_settings(cfg));  // attention: ring, all-to-all (Ulysses) or both over cp
    print0(rank, cp_summary(cp_settings(cfg), cfg.cp, cfg.seq_len));
  }
  // Fused CUDA kernels (kernels/README.md): norms, RoPE, SwiGLU, and the attention core
  // (--attention) and the loss where no technique replaced them. auto: fused on CUDA, except
  // in fp64, once the kernels have passed their GPU tests (kernels::kVerifiedOnGpu).
  const bool fused = cfg.kernels == "fused" || (cfg.kernels == "auto" && kernels::kVerifiedOnGpu && device.is_cuda() &&
                                                kernels::fused_built() && dtype != torch::kFloat64);
  if (fused) print0(rank, kernels::use_fused_kernels(*model, dtype, kernels::parse_attention(cfg.attention)));
  // Every decoder layer runs inside the layer wrappers (model.h), outermost first:
  //   pipeline (sends nudged at layer boundaries) -> zero-3 (parameters gathered, released)
  //   -> recompute (only the input kept) -> the layer
  // so they go on inner first: recompute here (it also wraps the attention core a
  // technique installed), ZeRO-3 with the optimizer, the pipeline last.
  apply_recompute(model, parse_recompute(cfg.recompute));
  // Then every parameter, whichever module now holds it, gets its slice of the full init.
  init_parameters(*model, plan, cfg.seed, cfg.init_std);
  if (!cfg.init_from.empty()) {  // a Hugging Face folder's weights: each rank its slices (runtime/hf.h)
    load_hf_weights(cfg.init_from, *model, plan, cfg.llama);
    print0(rank, "initialised from " + cfg.init_from + " (Hugging Face weights)");
  }

  // ---- optimizer: AdamW, its gradients all-reduced by data parallelism; or ZeRO -------
  std::unique_ptr<Optimizer> optimizer = make_optimizer(cfg, model, plan, mesh, experts.get(), fused);
  if (!optimizer->summary().empty()) print0(rank, optimizer->summary());
  std::vector<TrainableParam>& params = optimizer->params();  // name, tensor, main grad, shard record
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
  print0(rank, data_summary(cfg, loader));
  const std::optional<BatchLoader> val = validation_batches(sources.val, cfg, mesh, my_tokens);  // --val-data (validation.h)
  RunLog log(cfg, rank, device);  // the step line, --metrics-file, --memory-trace, --max-bad-steps
  const double peak_flops = device_peak_flops(device) * dist.world_size();
  const double flops_tok = flops_per_token(cfg.llama, cfg.seq_len);

  // ---- checkpoints (runtime/resume.h): resume on any mesh, save what this rank owns --
  const int64_t end_step = cfg.stop_at_step > 0 ? cfg.stop_at_step : cfg.steps;
  if (!cfg.save_dir.empty() && rank == 0) lock_save_dir(cfg.save_dir);  // one run per --save-dir at a time
  int64_t start_step = 0;
  if (!cfg.resume.empty()) start_step = resume_run(cfg, end_step, *optimizer, scaler, world, dist);
  const std::vector<StatePiece> owned = optimizer->owned_state(mesh.coords());
  StepProfiler profile(cfg.profile, cfg.profile_first, cfg.profile_last, end_step, rank, device.is_cuda());  // --profile

  // ---- the loop ---------------------------------------------------------------------
  mesh.reset_ledgers();  // --comm-report counts the training steps only
  for (int64_t step = start_step; step < end_step; ++step) {
    Timer timer;
    if (step == start_step) explain.begin(step + 1);
    profile.step_begins(step + 1);
    reset_peak_memory(device);  // "mem": this step's peak (tensor memory; on the CPU counted exactly)
    optimizer->zero_main_grads();
    log.memory(step + 1, "start");
    auto loss_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    if (pipeline) {  // the schedule decides the order; data parallelism syncs after the last backward
      explain.phase("the pipeline: every micro-batch's forward and backward, in " + cfg.pp_schedule + " order");
      profile.phase("pipeline: forward + backward");
      loss_sum = pipeline->run_step(step, loader, scaler.scale(),
                                    {[&] { optimizer->prepare_backward(/*last_micro_batch=*/false); },
                                     [&] { optimizer->accumulate_grads(); }});
      log.memory(step + 1, "pipeline");
    } else {
      for (int64_t micro = 0; micro < cfg.grad_acc_steps; ++micro) {
        const Batch batch = loader.micro_batch(step, micro);
        const std::string nth = "micro-batch " + std::to_string(micro + 1) + " of " + std::to_string(cfg.grad_acc_steps);
        explain.phase(nth + ": forward");
        profile.phase("forward");
        // Only the last micro-batch's backward communicates (no-sync for the others).
        optimizer->prepare_backward(/*last_micro_batch=*/micro == cfg.grad_acc_steps - 1);
        auto loss = model->loss(batch.inputs.to(device), batch.targets.to(device), batch.positions) /
                    double(cfg.grad_acc_steps);
        log.memory(step + 1, "forward", micro);  // the activations kept for backward are all alive here
        explain.phase(nth + ": backward");
        profile.phase("backward");
        (loss * scaler.scale()).backward();      // [B, S] -> grads (fp32/fp64: straight into the main grads)
        optimizer->accumulate_grads();           // main_grad += grad, for bf16/fp16 grads no hook took
        loss_sum += loss.detach().to(torch::kFloat64);
        log.memory(step + 1, "backward", micro);
      }
    }
    // The cp x dp average of the gradients (ZeRO: of this rank's slice), with the sums the
    // techniques make over their own axes.
    explain.phase("gradient sync (what backward did not already send)");
    profile.phase("grad sync");
    std::function<void()> fix_ups;  // none when no technique sums over its own axis
    if (pipeline || cfg.sp || experts)
      fix_ups = [&] {
        if (pipeline) pipeline->sync_tied_embedding(params);          // lookup + head parts of a tied embedding
        if (cfg.sp) sync_sequence_parallel_grads(params, mesh.tp());  // norm gains saw S/tp tokens
        if (experts && cfg.zero == 0) experts->sync_expert_grads(params);  // each expert over its copies, / dp
      };
    optimizer->sync_grads(fix_ups);
    log.memory(step + 1, "sync");
    // One norm over every shard, replicas counted once; it also decides an fp16 overflow,
    // identically on every rank. Clipping and unscaling are one factor inside the update.
    explain.phase("global gradient norm, then the optimizer step");
    profile.phase("grad norm + optimizer");
    const double norm = optimizer->grad_norm(mesh.world(), mesh.coords()) / scaler.scale();
    const bool finite = std::isfinite(norm);
    const double lr = lr_at(step, cfg);
    const double grad_scale = clip_coefficient(norm, cfg.grad_clip) / scaler.scale();
    if (finite) optimizer->step(lr, grad_scale);
    scaler.update(finite);
    log.memory(step + 1, "optimizer");
    explain.phase("the loss of the whole global batch");
    profile.phase("loss all-reduce");
    mesh.cp_dp().all_reduce_async(loss_sum, ReduceOp::kAvg).wait();  // loss of the whole global batch
    explain.end(dist);  // --explain: rank 0 prints every rank's narration

    StepStats stats;
    stats.step = step + 1;
    stats.steps = cfg.steps;
    stats.loss = loss_sum.item<double>();  // syncs the device: the timer is honest
    stats.tokens_per_s = double(loader.tokens_per_step()) / timer.seconds();
    stats.lr = lr;
    stats.grad_norm = norm;
    stats.mfu = peak_flops > 0 ? flops_tok * stats.tokens_per_s / peak_flops : -1.0;
    stats.peak_mem_bytes = peak_memory_bytes(device);
    if (cfg.llama.is_moe()) {  // a mixture of experts: the routing of the global batch
      auto counts = model->routed_tokens.defined()  // [E], this rank's micro-batches (pp: the last stage's loss)
                        ? model->routed_tokens.to(torch::kFloat64).contiguous()
                        : torch::zeros({cfg.llama.num_local_experts}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
      mesh.cp_dp().all_reduce(counts, ReduceOp::kSum);
      if (cfg.sp) mesh.tp().all_reduce(counts, ReduceOp::kSum);  // each tp rank routed S/tp of the tokens
      if (cfg.pp > 1) mesh.pp().broadcast(counts, cfg.pp - 1);    // the last stage counted every layer
      counts = counts.cpu();
      stats.tokens_per_expert.assign(counts.data_ptr<double>(), counts.data_ptr<double>() + counts.numel());
      model->routed_tokens = torch::Tensor();
    }
    stats.skipped = !finite;
    if (val && evaluation_due(step + 1, end_step, cfg.eval_every))
      stats.val_loss = validation_loss(model, pipeline.get(), mesh, *val, cfg.eval_batches, cfg.grad_acc_steps, device);
    if (!log.step_done(stats)) return 3;  // diverged (--max-bad-steps)
    if (const std::string table = profile.step_ends(step + 1); !table.empty()) print0(rank, table);
    if (checkpoint_due(cfg, step + 1, end_step))
      save_checkpoint(cfg, {step + 1, optimizer->steps_taken(), scaler.scale(), scaler.clean_steps()}, owned, world);
  }
  log.finish();
  if (val && start_step == end_step)  // no step to log it with (--steps 0: an imported model, say)
    print0(rank, validation_line(
                     validation_loss(model, pipeline.get(), mesh, *val, cfg.eval_batches, cfg.grad_acc_steps, device), cfg));
  if (cfg.comm_report)
    print0(rank, mesh.comm_report(cfg.steps, {pipeline ? &pipeline->embedding_group() : nullptr,
                                              experts ? &experts->ep_group() : nullptr,
                                              experts ? &experts->replica_group() : nullptr}));
  if (pipeline && !cfg.pp_trace.empty()) pipeline->write_trace(cfg.pp_trace, world, cfg.steps);

  // ---- results: full tensors reassembled on rank 0 from every rank's shards ----------
  if (!cfg.save_params.empty() || !cfg.export_hf.empty()) {  // fp32 master weights (fp64 in fp64 runs)
    const auto full = gather_full_tensors(optimizer->masters_by_name(), cfg.llama, shape, plan_of,
                                          optimizer->state_dtype(), world);
    if (rank == 0 && !cfg.save_params.empty()) {
      save_tensors(cfg.save_params, full);
      print0(rank, "saved parameters to " + cfg.save_params);
    }
    if (rank == 0 && !cfg.export_hf.empty()) {
      export_hf(cfg.export_hf, cfg.llama, full);
      print0(rank, "exported a Hugging Face folder to " + cfg.export_hf + " (config.json, model.safetensors)");
    }
  }
  const bool uses_whole_model = prints_samples(cfg) || !cfg.eval.empty() || !cfg.prompt_ids.empty() || !cfg.prompt.empty();
  if (uses_whole_model) {  // a whole model on rank 0, whatever the mesh trained
    const auto full = gather_full_tensors(optimizer->weights_by_name(), cfg.llama, shape, plan_of, dtype, world);
    if (rank == 0) {
      LlamaForCausalLM whole(cfg.llama, replicated_plan(cfg.llama), torch::TensorOptions().device(device).dtype(dtype));
      load_parameters(*whole, full);
      if (!cfg.eval.empty()) print_eval(whole, cfg.eval, cfg.eval_logits);
      if (!cfg.prompt_ids.empty()) print_continuation(whole, cfg.prompt_ids, cfg.generate);
      else if (!cfg.prompt.empty()) print_text_continuation(whole, cfg.tokenizer, cfg.prompt, cfg.generate);
      else if (prints_samples(cfg)) print_samples(whole, cfg, loader);
    }
  }
  return 0;
}


// --dry-run: no launch, no allocation; the summaries are pure arithmetic (rank 0 prints).
int dry_run(const TrainConfig& cfg, int rank, const PlanOf& plan_of) {
  if (rank != 0) return 0;
  const MeshShape shape{cfg.dp, cfg.pp, cfg.cp, cfg.tp};
  std::cout << model_summary(cfg) << "\n" << plan_summary(cfg, shape, plan_of) << "\n"
            << holdings_summary(cfg, shape, plan_of) << std::endl;
  std::cout << memory_summary(cfg, plan_of) << std::endl;
  if (cfg.pp > 1) {
    const PipelineSchedule s = parse_schedule(cfg.pp_schedule);
    std::cout << pipeline_summary(cfg.llama, s, cfg.pp, cfg.pp_virtual_stages) << "\n"
              << pipeline_programs_text(s, cfg.pp, int(cfg.grad_acc_steps), cfg.pp_virtual_stages) << std::endl;
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
  // Everything that can be wrong before any rank communicates (runtime/startup.h):
  // every rank finds the same problems and prints them.
  std::optional<TrainConfig> config = args.config;
  std::vector<std::string> problems = config ? config_problems(*config, launch)  // flags that did not parse:
                                             : std::vector<std::string>{args.message.substr(
                                                   args.message.rfind("error: ", 0) == 0 ? 7 : 0)};
  const PlanOf plan_of = [&](const MeshCoords& c) { return plan_for(*config, c); };
  if (problems.empty() && config->dry_run) return dry_run(*config, launch.rank, plan_of);
  if (problems.empty() && config->plan) {  // --plan: the layouts searched, nothing launched (rank 0 prints)
    if (launch.rank == 0) std::cout << plan_text(*config, plan_for) << std::endl;
    return 0;
  }
  DataSources data;  // --data and --val-data, opened (and checked) before the launch
  if (problems.empty()) problems = run_problems(*config, launch, plan_of, data);
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
