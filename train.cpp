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
#include <iostream>
#include <thread>

// the step
#include "picotron/comm.h"
#include "runtime/cli/settings.h"
#include "runtime/cli/train_config.h"
#include "picotron/data.h"
#include "picotron/distributed.h"
#include "picotron/init.h"
#include "picotron/mesh.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/optim_state.h"
#include "picotron/recompute.h"
#include "picotron/shard.h"
#include "picotron/dtype.h"
#include "runtime/observe/measure.h"
#include "runtime/output/print0.h"
// the techniques
#include "context_parallel/context_parallel.h"
#include "data_parallel/data_parallel.h"
#include "kernels/kernels.h"
#include "kernels/fp8.h"
#include "expert_parallel/expert_parallel.h"
#include "pipeline_parallel/pipeline_parallel.h"
#include "tensor_parallel/tensor_parallel.h"
#include "zero/zero.h"
// the runtime that keeps it safe
#include "runtime/checkpoint/async_save.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/observe/explain.h"
#include "runtime/observe/flight_dump.h"
#include "runtime/cli/flags.h"
#include "runtime/text/generate.h"
#include "runtime/checkpoint/hf.h"
#include "runtime/planner/layout_search.h"
#include "runtime/observe/profile.h"
#include "runtime/observe/projections.h"
#include "runtime/observe/holdings.h"
#include "runtime/observe/report.h"
#include "runtime/preflight/run_dir.h"
#include "runtime/checkpoint/resume.h"
#include "runtime/checkpoint/whole_model.h"
#include "runtime/preflight/preflight.h"
#include "runtime/preflight/resolve.h"
#include "runtime/preflight/startup.h"
#include "runtime/observe/step_watch.h"
#include "runtime/observe/validation.h"
#include "runtime/output/output_file.h"

using namespace picotron;

namespace {

// What the rank at `here` holds: every parameter's shard record. A pure function of the
// config and the mesh coordinates, so any rank can compute any other rank's plan (the
// gather for sampling and --save-params does). Each technique that cuts parameters adds
// its line: tensor parallelism splits the projections over tp, pipeline parallelism keeps
// a stage's layers. (ZeRO then slices what this plan holds over cp x dp, in zero/.)
ShardPlan shard_plan_for(const TrainConfig& cfg, const MeshCoords& here) {
  ShardPlan plan = replicated_plan(cfg.llama);  // data parallelism: everything, everywhere
  if (cfg.tp > 1) shard_for_tensor_parallel(plan, cfg.llama, here.tp, cfg.tp);  // projections, vocabulary over tp
  if (cfg.pp > 1) keep_pipeline_stage(plan, cfg.llama, here.pp, cfg.pp, cfg.pp_virtual_stages,
                                      is_v_shape(parse_schedule(cfg.pp_schedule)));  // this stage's layers
  if (cfg.ep > 1) keep_local_experts(plan, cfg.llama, here.dp % cfg.ep, cfg.ep);  // this ep rank's experts
  return plan;
}

// The optimizer of this run, behind one interface (picotron/optim.h): --zero 0 keeps the
// whole AdamW state on every rank and all-reduces the gradients over cp x dp
// (data_parallel/); --zero 1/2/3 keeps a 1/(cp x dp) slice of the state, the gradients,
// the parameters (zero/). With expert parallelism the experts get one of their own, over
// the ranks that hold the same experts (expert_parallel/).
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& cfg, LlamaForCausalLM& model, const ShardPlan& plan,
                                          Mesh& mesh, ExpertParallel* experts, bool fused_kernels) {
  ExpertParallel::NamedTensors named;
  for (auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
  AdamWOptions adam{cfg.beta1, cfg.beta2, cfg.adam_eps, cfg.weight_decay, /*fused_step=*/{}};
  if (fused_kernels && cfg.zero == 0) kernels::use_fused_adamw(adam);  // one multi-tensor launch (kernels/adamw.cu)
  // One optimizer over `group` (per_copy: its ranks that hold one copy in the ep axis, for
  // --zero-shard / --zero-hpz, which count ranks x cp of one copy).
  const auto over = [&](Comm& group, const ExpertParallel::NamedTensors& these, int per_copy) -> std::unique_ptr<Optimizer> {
    if (cfg.zero > 0)
      return make_zero_optimizer(cfg.zero, group, these, adam, plan, mesh.coords(), cfg.dp_bucket_mb, cfg.zero_offload,
                                 model, zero_block_ranks(cfg.zero_shard, cfg.cp, per_copy, group.size()),
                                 cfg.zero_hpz == 0 ? 0 : zero_block_ranks(cfg.zero_hpz, cfg.cp, per_copy, group.size()));
    auto adamw = std::make_unique<AdamW>(these, adam, plan);
    adamw->sync_gradients_with(std::make_unique<DataParallel>(group, adamw->params(), cfg.dp_mode, cfg.dp_bucket_mb));
    return adamw;
  };
  if (experts) return experts->optimizer(named, plan, mesh.cp_dp(), over);  // dense over cp x dp, experts over their copies
  return over(mesh.cp_dp(), named, 1);
}

// ---- the model on the mesh: this rank's shards, with every technique in its slots ----
struct ModelOnMesh {
  ShardPlan plan;                            // what this rank holds (shard_plan_for)
  LlamaForCausalLM model{nullptr};
  std::unique_ptr<ExpertParallel> experts;   // --ep: the MoE layers' tokens to their experts and back
  std::vector<int64_t> my_tokens;            // [S/cp]: this cp rank's positions of every sequence
  bool fused = false;                        // --kernels: the fused CUDA kernels are in
};

ModelOnMesh build_model(const TrainConfig& cfg, Mesh& mesh, const ShardPlanOf& shard_plan_of, torch::Device device) {
  const auto dtype = scalar_type(cfg.dtype);
  const int rank = mesh.rank();
  ModelOnMesh m;
  m.plan = shard_plan_of(mesh.coords());
  const auto opts = torch::TensorOptions().device(device).dtype(dtype);
  m.model = LlamaForCausalLM(cfg.llama, m.plan, opts);
  auto& model = m.model;
  add_experts(*model, m.plan, opts);  // Mixtral: experts in place of the MLPs (moe.h)
  // Techniques replace the model's slots here, one line each (see model.h).
  if (cfg.tp > 1) apply_tensor_parallel(model, m.plan, mesh.tp(), cfg.sp);  // f/g around blocks, vocab-parallel embedding + loss
  if (cfg.ep > 1) m.experts = std::make_unique<ExpertParallel>(model, mesh.cp_dp(), cfg.ep, cfg.cp);
  sum_routing_over(*model, cfg.cp > 1 ? &mesh.cp() : nullptr, cfg.sp ? &mesh.tp() : nullptr);  // MoE: whole sequences' statistics
  const CpLayout cp_layout = parse_cp_layout(cfg.cp_layout);
  m.my_tokens = cp_positions(cfg.seq_len, cfg.cp, mesh.coords().cp, cp_layout);
  if (cfg.cp > 1) {
    apply_context_parallel(model, mesh, cp_settings(cfg));  // attention: ring, all-to-all (Ulysses) or both over cp
    print0(rank, cp_summary(cp_settings(cfg), cfg.cp, cfg.seq_len));
    if (const std::string groups = cp_groups_text(cp_settings(cfg), mesh.shape()); !groups.empty()) print0(rank, groups);
  }
  if (cfg.fp8)  // the projections' GEMMs in fp8, their scales max-reduced where the tensors are split (kernels/fp8.h)
    print0(rank, fp8::apply_fp8(model, {&mesh.tp(), &mesh.cp()}));
  // Fused CUDA kernels (kernels/README.md): norms, RoPE, SwiGLU, and the attention core
  // (--attention) and the loss where no technique replaced them.
  m.fused = kernels::fused_chosen(cfg.kernels, device.is_cuda(), dtype == torch::kFloat64, kernels::fused_built());
  if (m.fused) print0(rank, kernels::use_fused_kernels(*model, dtype, kernels::parse_attention(cfg.attention)));
  // Every decoder layer runs inside the layer wrappers (model.h), outermost first:
  //   zero-3 (parameters gathered, released) -> recompute (only the input kept) -> the layer
  // so they go on inner first: recompute here (it also wraps the attention core a
  // technique installed), ZeRO-3 with the optimizer.
  apply_recompute(model, parse_recompute(cfg.recompute));
  // Then every parameter, whichever module now holds it, gets its slice of the full init.
  init_parameters(*model, m.plan, cfg.seed, cfg.init_std);
  if (!cfg.init_from.empty()) {  // a Hugging Face folder's weights: each rank its slices (runtime/checkpoint/hf.h)
    load_hf_weights(cfg.init_from, *model, m.plan, cfg.llama);
    print0(rank, "initialised from " + cfg.init_from + " (Hugging Face weights)");
  }
  return m;
}

// ---- the phases of a run around the step ---------------------------------------------

// What this run is, printed once by rank 0: the model, the launch, the mesh, the shard
// plan, what each rank holds, the pipeline's schedule.
void print_run(const TrainConfig& cfg, const Distributed& dist, torch::Device device, const MeshShape& shape,
               const ShardPlanOf& shard_plan_of) {
  const int rank = dist.rank();
  print0(rank, model_summary(cfg));
  print0(rank, "launch: " + std::string(launcher_name(dist.info().launcher)) + ", " + std::to_string(dist.world_size()) +
                   " process(es), device " + device.str() + ", " + precision_name(cfg.dtype) + (cfg.fp8 ? " + fp8 linears" : ""));
  print0(rank, describe_mesh(shape));
  print0(rank, plan_summary(cfg, shape, shard_plan_of));
  print0(rank, holdings_summary(cfg, shape, shard_plan_of));
  if (cfg.pp > 1) print0(rank, pipeline_summary(cfg.llama, parse_schedule(cfg.pp_schedule), cfg.pp, cfg.pp_virtual_stages));
}

// pp > 1: the micro-batches run through the stages in the schedule's order (pipeline_parallel/).
std::unique_ptr<Pipeline> make_pipeline(const TrainConfig& cfg, LlamaForCausalLM& model, Mesh& mesh,
                                        const std::vector<int64_t>& my_tokens, torch::Device device) {
  if (cfg.pp == 1) return nullptr;
  Pipeline::Options opts{parse_schedule(cfg.pp_schedule), cfg.pp_virtual_stages, cfg.grad_acc_steps,
                         cfg.micro_batch_size, cfg.seq_len / cfg.cp, cfg.sp, !cfg.pp_trace.empty(),
                         torch::tensor(my_tokens, torch::kInt64), /*side=*/{}};
  if (RouterLog* log = router_log_of(*model))  // a mixture of experts: its router statistics travel to the loss's stage
    opts.side = {[log] { return log->side_buffers(); }, [log](const std::vector<torch::Tensor>& e) { log->carry(e); },
                 [log] { return log->take(); }};
  return std::make_unique<Pipeline>(model, mesh, opts, torch::TensorOptions().device(device).dtype(scalar_type(cfg.dtype)));
}

// The sums each technique makes over its own axis, registered with the optimizer, which
// runs them after (or within) the cp x dp average: Optimizer::sync_grads (picotron/optim.h).
void add_own_axis_sums(Optimizer& optimizer, const TrainConfig& cfg, Mesh& mesh, Pipeline* pipeline) {
  using Held = std::vector<TrainableParam>;
  if (pipeline)  // the tied embedding: its lookup (first stage) and its head (last stage)
    optimizer.add_grad_sum([pipeline](Held& held) { pipeline->sync_tied_embedding(held); });
  if (cfg.sp)  // the norm gains saw S/tp tokens on each tp rank
    optimizer.add_grad_sum([&tp = mesh.tp()](Held& held) { sync_sequence_parallel_grads(held, tp); });
}

// ---- one training step ---------------------------------------------------------------
struct Trainer {  // what a step works with
  const TrainConfig& cfg;
  Mesh& mesh;
  LlamaForCausalLM& model;
  Optimizer& optimizer;
  Pipeline* pipeline;  // pp > 1
  LossScaler& scaler;
  torch::Device device;
};
struct StepResult {
  double loss, grad_norm, lr;
  bool stepped;  // false: an fp16 overflow skipped the update
};

// The step of picotron's train_step: every micro-batch's forward and backward, the
// gradients synced, one global norm, one clipped AdamW update. `watch` only observes
// (runtime/observe/step_watch.h: --explain, --profile, --memory-trace).
StepResult train_step(Trainer& t, const BatchLoader& loader, int64_t step, StepWatch& watch) {
  const int64_t m = t.cfg.grad_acc_steps;
  t.optimizer.zero_main_grads();
  watch.begin(step);
  auto loss_sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(t.device));  // [1]
  if (t.pipeline) {  // the schedule decides the order of the micro-batches' forwards and backwards
    watch.phase(StepPhase::kPipeline);
    Pipeline::Hooks hooks{[&] { t.optimizer.prepare_backward(/*last_micro_batch=*/false); },
                          [&] { t.optimizer.accumulate_grads(); }, {}};
    if (watch.explaining()) hooks.before_action = [&](const std::string& what) { watch.action(what); };
    loss_sum = t.pipeline->run_step(step, loader, t.scaler.scale(), hooks);
  } else {
    for (int64_t micro = 0; micro < m; ++micro) {
      const Batch batch = loader.micro_batch(step, micro);
      PlaceScope in_micro_batch(StepPlace::of_micro_batch(int(micro)));  // (what observes a run reads it: step_place.h)
      watch.phase(StepPhase::kForward, micro);
      t.optimizer.prepare_backward(/*last_micro_batch=*/micro == m - 1);  // only the last one communicates
      auto loss = t.model->loss(batch.inputs.to(t.device), batch.targets.to(t.device), batch.positions) / double(m);
      watch.phase(StepPhase::kBackward, micro);
      (loss * t.scaler.scale()).backward();  // [B, S] -> grads (fp32/fp64: straight into the main grads)
      t.optimizer.accumulate_grads();        // main_grad += grad, for bf16/fp16 grads no hook took
      loss_sum += loss.detach().to(torch::kFloat64);
    }
  }
  watch.phase(StepPhase::kGradSync);
  t.optimizer.sync_grads();  // the cp x dp average, and the sums each technique registered over its axis
  // One norm over every shard, replicas counted once; it also decides an fp16 overflow,
  // identically on every rank. Clipping and unscaling are one factor inside the update.
  watch.phase(StepPhase::kOptimizer);
  const double norm = t.optimizer.grad_norm(t.mesh.world(), t.mesh.coords()) / t.scaler.scale();
  const bool finite = std::isfinite(norm);
  const double lr = lr_at(step, lr_schedule(t.cfg));
  if (finite) t.optimizer.step(lr, clip_coefficient(norm, t.cfg.grad_clip) / t.scaler.scale());
  t.scaler.update(finite);
  watch.phase(StepPhase::kLoss);
  t.mesh.cp_dp().all_reduce_async(loss_sum, ReduceOp::kAvg, carries("the loss of the whole global batch, averaged")).wait();
  return {loss_sum.item<double>(), norm, lr, finite};  // item(): syncs the device, so the step's timer is honest
}

// The step line's figures (runtime/observe/report.h: RunLog prints them and writes --metrics-file).
StepStats step_stats(const TrainConfig& cfg, int64_t step, const StepResult& r, double tokens_per_s, double peak_flops,
                     torch::Device device) {
  StepStats stats;
  stats.step = step + 1;
  stats.steps = cfg.steps;
  stats.loss = r.loss;
  stats.tokens_per_s = tokens_per_s;
  stats.lr = r.lr;
  stats.grad_norm = r.grad_norm;
  stats.mfu = peak_flops > 0 ? flops_per_token(cfg.llama, cfg.seq_len) * tokens_per_s / peak_flops : -1.0;
  stats.peak_mem_bytes = peak_memory_bytes(device);
  stats.skipped = !r.stepped;
  return stats;
}

// The run's tokens: this dp rank's rows of every global batch (with cp, this cp rank's
// positions of each sequence; their targets and RoPE positions follow), and --val-data's.
struct Batches {
  BatchLoader train;
  std::optional<BatchLoader> val;
};
Batches make_batches(const TrainConfig& cfg, const DataSources& sources, Mesh& mesh, const std::vector<int64_t>& my_tokens) {
  BatchLoader train(sources.train, cfg.seed, cfg.seq_len, cfg.micro_batch_size, cfg.grad_acc_steps, mesh.shape().dp,
                    mesh.coords().dp);
  if (cfg.cp > 1) train.keep_positions(my_tokens);
  print0(mesh.rank(), data_summary(cfg, train));
  return {train, validation_batches(sources.val, validation_settings(cfg), mesh, my_tokens)};
}

// What a step adds to its line beside the loss: a mixture of experts' tokens per expert,
// and --val-data's loss when it is due.
void add_step_figures(StepStats& stats, Trainer& t, const Batches& data, int64_t step, int64_t end_step) {
  if (t.cfg.llama.is_moe())
    stats.tokens_per_expert = global_tokens_per_expert(*t.model, t.mesh, t.cfg.sp, t.pipeline ? t.pipeline->loss_rank() : 0);
  if (data.val && evaluation_due(step + 1, end_step, t.cfg.eval_every))
    stats.val_loss = validation_loss(t.model, t.pipeline, t.mesh, *data.val, t.cfg.eval_batches, t.cfg.grad_acc_steps, t.device);
}

// The reports at the end of a run: --val-data's loss when no step logged it (--steps 0:
// an imported model, say), --comm-report (every group's calls and elements per step,
// the techniques' own groups included), --pp-trace.
void report_end(Trainer& t, const Batches& data, ExpertParallel* experts, bool stepped, Comm& world) {
  if (data.val && !stepped)
    print0(world.rank(), validation_line(validation_loss(t.model, t.pipeline, t.mesh, *data.val, t.cfg.eval_batches,
                                                         t.cfg.grad_acc_steps, t.device), t.cfg.eval_batches));
  if (t.cfg.comm_report) print0(world.rank(), t.mesh.comm_report(t.cfg.steps));  // every group the run made
  if (!t.cfg.run_dir.empty()) write_rank_end(t.cfg.run_dir, world, t.cfg.steps, peak_memory_bytes(t.device));  // each rank's ledger, peak
  if (t.pipeline && !t.cfg.pp_trace.empty()) t.pipeline->write_trace(t.cfg.pp_trace, world, t.cfg.steps, write_file);
}

// ---- the run: mesh, model on the mesh, optimizer, the loop, the end ---------------------
int run(TrainConfig cfg, const DataSources& sources, Distributed& dist) {
  const int rank = dist.rank();
  wait_for_debugger(cfg, rank);  // --wait-for-debugger: a rank's pid printed, and a pause until gdb attaches
  count_cpu_tensor_memory();  // "mem" and --memory-trace: exact bytes of CPU tensors from here on
  const torch::Device device = choose_device(cfg, dist);  // its GPU or the CPU (resolve_device), threads per rank

  // ---- mesh -----------------------------------------------------------------------
  // Building the communicators (MPI_Comm_dup/split, NCCL init) has no timeout of its own: bounded here.
  RendezvousDeadline setup(rank, "building the communicators (the world, then the mesh's groups)", std::chrono::seconds(cfg.timeout_s));
  Comm world = Comm::world(dist, device, std::chrono::seconds(cfg.timeout_s));
  FlightDump flight(flight_settings(cfg), world);  // every rank's last communications, written on a hang or error (--flight-recorder)
  Mesh mesh(world, MeshShape{cfg.dp, cfg.pp, cfg.cp, cfg.tp});
  setup.disarm();
  const ShardPlanOf shard_plan_of = [&](const MeshCoords& c) { return shard_plan_for(cfg, c); };
  Explainer explain(cfg, mesh, shard_plan_of);  // --explain: the first step narrated, rank by rank
  print_run(cfg, dist, device, mesh.shape(), shard_plan_of);
  if (!cfg.run_dir.empty() && rank == 0)  // --run-dir: command, config, mesh, holdings, the run's own estimate (run_dir.h)
    write_run_start(cfg, mesh.shape(), shard_plan_of, device.str(), launcher_name(dist.info().launcher));

  // ---- model on the mesh; optimizer: AdamW, its gradients all-reduced by data parallelism, or ZeRO
  ModelOnMesh on_mesh = build_model(cfg, mesh, shard_plan_of, device);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(cfg, on_mesh.model, on_mesh.plan, mesh, on_mesh.experts.get(), on_mesh.fused);
  OptimizerState* state = optimizer->state();  // checkpoints, exports, reports (picotron/optim_state.h)
  if (state && !state->summary().empty()) print0(rank, state->summary());
  const std::unique_ptr<Pipeline> pipeline = make_pipeline(cfg, on_mesh.model, mesh, on_mesh.my_tokens, device);
  add_own_axis_sums(*optimizer, cfg, mesh, pipeline.get());
  check_projections(*on_mesh.model, on_mesh.plan, cfg.fp8, cfg.explain, rank);  // runtime/observe/projections.h
  LossScaler scaler(cfg.dtype == Precision::kFP16);
  const Batches data = make_batches(cfg, sources, mesh, on_mesh.my_tokens);

  // ---- checkpoints (runtime/checkpoint/): resume on any mesh, save what this rank owns; what watches the steps
  const int64_t end_step = cfg.stop_at_step > 0 ? cfg.stop_at_step : cfg.steps;
  Checkpointer checkpoints(checkpoint_settings(cfg), world);  // --save-dir, --save-every, --async-save (runtime/checkpoint/async_save.h)
  const int64_t start_step = checkpoints.open(end_step, *optimizer, scaler, dist);  // --save-dir's lock, --resume
  const std::vector<StatePiece> owned = state ? state->owned_state(mesh.coords()) : std::vector<StatePiece>{};
  RunLog log(run_log_settings(cfg), rank, device);  // the step line, --metrics-file, --memory-trace, --max-bad-steps
  StepProfiler profile(cfg.profile, cfg.profile_first, cfg.profile_last, end_step, rank, device.is_cuda());  // --profile
  StepWatch watch(step_watch_settings(cfg), device, explain, profile, log, start_step);  // (refuses a --profile-steps range already passed)

  // ---- the loop ---------------------------------------------------------------------
  Trainer trainer{cfg, mesh, on_mesh.model, *optimizer, pipeline.get(), scaler, device};
  const double peak_flops = device_peak_flops(device) * dist.world_size();  // of all ranks, for the MFU
  mesh.reset_ledgers();  // --comm-report counts the training steps only
  for (int64_t step = start_step; step < end_step; ++step) {
    Timer timer;
    const StepResult r = train_step(trainer, data.train, step, watch);
    StepStats stats = step_stats(cfg, step, r, double(data.train.tokens_per_step()) / timer.seconds(), peak_flops, device);
    add_step_figures(stats, trainer, data, step, end_step);  // (its communication is the step's too)
    watch.end(dist);  // --explain: rank 0 prints every rank's narration
    if (!log.step_done(stats)) return 3;  // diverged (--max-bad-steps)
    if (const std::string table = watch.profile_table(step); !table.empty()) print0(rank, table);
    checkpoints.after_step(step + 1, end_step, {step + 1, state ? state->steps_taken() : 0, scaler.scale(), scaler.clean_steps()},
                           owned);  // when due: saved in the step, or in the background (--async-save)
  }
  checkpoints.finish();  // a background write waited for and finished
  log.finish();

  // ---- the end: reports, and the whole model where something needs it ----------------
  report_end(trainer, data, on_mesh.experts.get(), start_step < end_step, world);
  save_whole_model(whole_model_settings(cfg), *optimizer, mesh.shape(), shard_plan_of, world);  // --save-params, --export-hf (runtime/checkpoint/whole_model.h)
  use_whole_model(text_settings(cfg), *optimizer, mesh.shape(), shard_plan_of, device, world, data.train);  // samples, --eval, --prompt (runtime/text/generate.h)
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Flags, launch, every check on every rank, MPI started (runtime/preflight/preflight.h);
  // --help, --dry-run, --plan, --check-checkpoint and any problem end here.
  Launched ready = preflight(argc, argv, shard_plan_for);
  if (ready.exit_code) return *ready.exit_code;
  // The run; an error on any rank is one line and the job's abort (nobody waits forever).
  return run_or_abort(ready, [&] { return run(ready.config, ready.data, *ready.dist); });
}
