// runtime/cli/flag_rules.cpp — check_flag_rules(): each flag's own checks (the table in
// flag_table.cpp), then the rules between flags: the mesh against the world size and the
// model's sizes, the techniques' pairings, the pipeline schedule's and the context-parallel
// layout's own rules. One line per problem, naming the flags and the numbers.
#include <sstream>
#include <string>
#include <vector>

#include "context_parallel/cp_layout.h"
#include "runtime/cli/flags.h"
#include "pipeline_parallel/schedules.h"
#include "runtime/cli/train_config.h"

namespace picotron {
namespace {

const TrainConfig kDefaults;  // the flags' defaults: a flag left at its default needs nothing

// The problems found so far. need(ok, pieces...): a rule and its message, the pieces
// joined only when it fails (the planner, layout_search.h, asks about some 10^5 layouts,
// which pass nearly every rule).
struct Rules {
  std::vector<std::string> errors;
  template <class... Pieces>
  void need(bool ok, const Pieces&... pieces) {
    if (!ok) errors.push_back((std::string() + ... + pieces));
  }
  // Whether a problem already names `flag` (its own check refused its value): not named twice.
  bool named(const std::string& flag) const {
    for (const auto& e : errors)
      if (e.find(flag + " ") != std::string::npos) return true;
    return false;
  }
};

// --kernels, --fp8, --attention, --profile-steps, --wait-for-debugger: what each needs.
void tool_rules(Rules& r, const RunConfig& c, int world_size) {
  r.need(!(c.kernels == "fused" && c.device == "cpu"),
         "--kernels fused runs the CUDA kernels of kernels/: it needs --device cuda (on the CPU: --kernels aten)");
  r.need(!(c.kernels == "fused" && c.dtype_given && c.dtype == Precision::kFP64),
         "--kernels fused takes bf16, fp16 or fp32 (--dtype fp64 runs with --kernels aten)");
  r.need(!(c.fp8 && c.dtype == Precision::kFP16),
         "--fp8 takes --dtype fp64, fp32 or bf16 (fp16's loss scaling and fp8's own scales are not combined; --dtype fp8 is bf16 + --fp8)");
  // zb-h1 and dualpipev split each projection's backward (dX in B, dW later in W) by putting a
  // deferring linear in its slot (pipeline_parallel/zero_bubble.h), which would take the fp8
  // linear's place: refused, not run unquantised.
  r.need(!(c.fp8 && c.pp > 1 && splits_backward(parse_schedule(c.pp_schedule))),
         "--fp8 and --pp-schedule ", c.pp_schedule, " both replace the projections (", c.pp_schedule,
             " defers their dW to a W pass): use --pp-schedule afab, 1f1b or interleaved");
  r.need(c.attention == "sdpa" || c.kernels == "fused",
         "--attention ", c.attention, " is a kernel of kernels/: it needs --kernels fused (and --device cuda)");
  r.need(c.profile_first == 0 || !c.profile.empty(), "--profile-steps needs --profile DIR (where the trace goes)");
  const std::string& w = c.wait_for_debugger;
  const bool wait_rank = !w.empty() && w.size() < 9 && w.find_first_not_of("0123456789") == std::string::npos;
  r.need(w == "none" || w == "all" || wait_rank, "--wait-for-debugger takes none, all or a rank number, got '", w, "'");
  r.need(!wait_rank || std::stoi(w) < world_size,
         "--wait-for-debugger ", w, ": there is no such rank (", value_text(world_size), " rank(s))");
}

// The step's size; what --eval, --prompt, --val-data and the checkpoints' flags need.
void output_rules(Rules& r, const RunConfig& c) {
  const LlamaConfig& m = c.llama;
  // Products of the (bounded) sizes: rows and tokens of a step.
  if (c.micro_batch_size > 0 && c.grad_acc_steps > 0 && c.dp > 0 && c.seq_len > 0) {
    int64_t rows = 0, tokens = 0;
    const bool overflow = __builtin_mul_overflow(c.micro_batch_size, c.grad_acc_steps, &rows) ||
                          __builtin_mul_overflow(rows, int64_t(c.dp), &rows) ||
                          __builtin_mul_overflow(rows, c.seq_len, &tokens);
    r.need(!overflow && tokens <= int64_t(1) << 40,
           "--micro-batch-size x --grad-acc-steps x --dp x --seq-len = the tokens of a step must be <= 2^40 (got ",
               (overflow ? std::string("more than 2^63") : value_text(tokens)), ")");
  }
  r.need(c.eval_logits.empty() || !c.eval.empty(), "--eval-logits needs --eval");
  r.need(c.prompt.empty() || !c.tokenizer.empty(), "--prompt needs --tokenizer (the text becomes token ids through it; or give --prompt-ids)");
  r.need(c.prompt.empty() || c.prompt_ids.empty(), "--prompt and --prompt-ids: give one of them");
  r.need(c.eval_every == 0 || !c.val_data.empty(), "--eval-every needs --val-data (the held-out tokens to evaluate)");
  r.need(c.eval_batches == kDefaults.eval_batches || !c.val_data.empty(), "--eval-batches needs --val-data");
  r.need(c.val_data.empty() || (c.val_data != "synthetic" && c.val_data != "arithmetic"),
         "--val-data must be held-out tokens (a token file, a directory of them, or a text file), got '", c.val_data, "'");
  for (int64_t id : c.prompt_ids)
    r.need(id < m.vocab_size, "--prompt-ids: token ", value_text(id), " is not below --vocab-size ", value_text(m.vocab_size));
  r.need(c.save_every == 0 || !c.save_dir.empty(), "--save-every ", value_text(c.save_every), " needs --save-dir");
  r.need(!c.async_save || !c.save_dir.empty(), "--async-save needs --save-dir (it writes the checkpoints there in the background)");
  r.need(c.keep_checkpoints == kDefaults.keep_checkpoints || !c.save_dir.empty() || r.named("--keep-checkpoints"),
         "--keep-checkpoints ", value_text(c.keep_checkpoints), " needs --save-dir (the checkpoints it keeps)");
}

// The model's shapes: heads, key/value heads, RoPE's even head dim, the schedule, the positions.
void model_rules(Rules& r, const RunConfig& c) {
  const LlamaConfig& m = c.llama;
  if (m.hidden_size > 0 && m.num_attention_heads > 0) {
    r.need(m.hidden_size % m.num_attention_heads == 0,
           "--hidden-size ", value_text(m.hidden_size), " is not divisible by --num-attention-heads ", value_text(m.num_attention_heads));
    r.need(m.head_dim() % 2 == 0 || m.hidden_size % m.num_attention_heads != 0,
           "--hidden-size ", value_text(m.hidden_size), " / --num-attention-heads ", value_text(m.num_attention_heads),
               " = head dim ", value_text(m.head_dim()), ", which must be even for RoPE");
  }
  if (m.num_attention_heads > 0 && m.num_key_value_heads > 0)
    r.need(m.num_attention_heads % m.num_key_value_heads == 0,
           "--num-attention-heads ", value_text(m.num_attention_heads), " is not divisible by --num-key-value-heads ",
               value_text(m.num_key_value_heads));
  r.need(c.warmup_steps < c.steps || c.steps <= 0,
         "--warmup-steps ", value_text(c.warmup_steps), " must be smaller than --steps ", value_text(c.steps));
  r.need(c.seq_len <= m.max_position_embeddings,
         "--seq-len ", value_text(c.seq_len), " exceeds --max-position-embeddings ", value_text(m.max_position_embeddings));
}

// The mesh against the launch, and what tensor parallelism splits.
void mesh_rules(Rules& r, const RunConfig& c, int world_size) {
  const LlamaConfig& m = c.llama;
  if (c.dp >= 1 && c.tp >= 1 && c.pp >= 1 && c.cp >= 1) {
    const int64_t product = int64_t(c.dp) * c.pp * c.cp * c.tp;
    // One process per rank: say the launch line that gives this layout its processes.
    r.need(product == world_size, "--dp ", value_text(c.dp), " x --pp ", value_text(c.pp), " x --cp ", value_text(c.cp), " x --tp ",
                                      value_text(c.tp), " = ", value_text(product), " ranks, but the job has ", value_text(world_size),
                                      " processes: launch it as mpirun -np ", value_text(product), " build/train ... (with --oversubscribe where the "
                                      "machine has fewer cores than ranks)");
  }
  if (c.tp > 1) {  // every rank holds whole heads, whole MLP columns, whole vocabulary rows
    for (auto [flag, v] : {std::pair{"--num-attention-heads", m.num_attention_heads},
                           {"--intermediate-size", m.intermediate_size}, {"--vocab-size", m.vocab_size}})
      r.need(v % c.tp == 0, std::string(flag), " ", value_text(v), " is not divisible by --tp ", value_text(c.tp));
    r.need(m.num_key_value_heads % c.tp == 0,
           "--num-key-value-heads ", value_text(m.num_key_value_heads), " is not divisible by --tp ", value_text(c.tp),
               " (grouped-query attention: every tp rank needs whole key/value heads; use --tp <= ",
               value_text(m.num_key_value_heads), " dividing it, or more --num-key-value-heads)");
  }
}

// A mixture of experts, and expert parallelism (expert_parallel/).
void expert_rules(Rules& r, const RunConfig& c) {
  const LlamaConfig& m = c.llama;
  if (m.is_moe()) {  // a mixture of experts (expert_parallel/moe.h)
    r.need(m.num_experts_per_tok <= m.num_local_experts, "--num-experts-per-tok ", value_text(m.num_experts_per_tok),
                                                             " exceeds --num-local-experts ", value_text(m.num_local_experts));
  }
  if (c.ep > 1) {  // expert parallelism (expert_parallel/)
    r.need(m.is_moe(), "--ep ", value_text(c.ep), " needs a mixture of experts (--num-local-experts > 0, e.g. --model tiny-moe)");
    r.need(c.dp % c.ep == 0, "--ep ", value_text(c.ep), " does not divide --dp ", value_text(c.dp),
                                 " (the experts are split over ranks of the data-parallel group)");
    r.need(!m.is_moe() || m.num_local_experts % c.ep == 0, "--num-local-experts ", value_text(m.num_local_experts),
                                                               " is not divisible by --ep ", value_text(c.ep));
  }
}

// --sp (over tp), and the pipeline schedule's own rules (pipeline_parallel/schedules.h).
void sequence_and_pipeline_rules(Rules& r, const RunConfig& c) {
  const LlamaConfig& m = c.llama;
  if (c.sp) {
    r.need(c.tp > 1, "--sp needs --tp > 1 (it splits the sequence over the tensor-parallel ranks), got --tp ", value_text(c.tp));
    r.need(c.tp < 1 || c.seq_len % c.tp == 0, "--seq-len ", value_text(c.seq_len), " is not divisible by --tp ", value_text(c.tp),
                                                  " (--sp splits the sequence over tp)");
  }
  if (c.pp > 1 && c.pp_virtual_stages >= 1) {  // the schedule's own rules (pipeline_parallel/schedules.h)
    const std::string problem =
        schedule_problem(parse_schedule(c.pp_schedule), c.pp, int(c.grad_acc_steps), c.pp_virtual_stages, m.num_hidden_layers);
    r.need(problem.empty(), problem);
  }
  r.need(c.pp > 1 || c.pp_trace.empty(), "--pp-trace needs --pp > 1 (it records the pipeline's actions)");
  r.need(c.pp > 1 || c.pp_virtual_stages == 1, "--pp-virtual-stages needs --pp > 1");
  r.need(c.pp > 1 || c.pp_schedule == kDefaults.pp_schedule, "--pp-schedule needs --pp > 1");
}

// ZeRO's HSDP and hpZ groups (zero/zero_groups.h), and --zero-offload.
void zero_rules(Rules& r, const RunConfig& c) {
  // HSDP and hpZ (zero/zero_groups.h): the shard group is --zero-shard dp ranks (0: all of
  // dp), hpZ's group --zero-hpz of those; with expert parallelism each holds every expert.
  if (c.zero_shard != 0 || c.zero_hpz != 0) {
    const int shard = c.zero_shard == 0 ? c.dp : c.zero_shard;
    r.need(c.zero >= 1, "--zero-shard / --zero-hpz need --zero 1, 2 or 3 (they say how ZeRO's slices are spread), got --zero ",
           value_text(c.zero));
    r.need(c.zero_shard == 0 || (c.zero_shard >= 1 && c.dp % c.zero_shard == 0), "--zero-shard ", value_text(c.zero_shard),
           " does not divide --dp ", value_text(c.dp), " (each shard group is that many dp ranks, the groups replicas of each other)");
    r.need(c.zero_hpz == 0 || c.zero == 3, "--zero-hpz needs --zero 3 (it keeps part of each layer's gathered parameters), got --zero ",
           value_text(c.zero));
    r.need(c.zero_hpz == 0 || (c.zero_hpz >= 1 && shard % c.zero_hpz == 0), "--zero-hpz ", value_text(c.zero_hpz),
           " does not divide the shard group's ", value_text(shard), " dp ranks (",
           c.zero_shard == 0 ? "--dp " + value_text(c.dp) : "--zero-shard " + value_text(c.zero_shard), ")");
    r.need(c.ep <= 1 || c.zero_shard == 0 || c.zero_shard % c.ep == 0, "--zero-shard ", value_text(c.zero_shard),
           " with --ep ", value_text(c.ep), ": the shard group must hold every expert (a multiple of --ep)");
    r.need(c.ep <= 1 || c.zero_hpz == 0 || c.zero_hpz % c.ep == 0, "--zero-hpz ", value_text(c.zero_hpz), " with --ep ",
           value_text(c.ep), ": hpZ's group must hold every expert (a multiple of --ep)");
  }
  r.need(!c.zero_offload || c.zero >= 1, "--zero-offload needs --zero 1, 2 or 3 (it offloads ZeRO's optimizer slice)");
  r.need(!c.zero_offload || c.device != "cpu",
         "--zero-offload moves the optimizer from the GPU to the CPU: it needs --device cuda (on --device cpu everything "
         "is on the CPU already)");
}

// Context parallelism's own flags do nothing without it: refused rather than ignored (a
// value the flag's own check refused already is not named twice); then the layout's and the mode's rules.
void cp_rules(Rules& r, const RunConfig& c) {
  const LlamaConfig& m = c.llama;
  r.need(c.cp > 1 || c.cp_mode == kDefaults.cp_mode || r.named("--cp-mode"), "--cp-mode ", c.cp_mode, " needs --cp > 1 (how attention meets the other cp ranks' tokens)");
  r.need(c.cp > 1 || c.cp_ulysses == kDefaults.cp_ulysses || r.named("--cp-ulysses"),
         "--cp-ulysses ", value_text(c.cp_ulysses), " needs --cp > 1 and --cp-mode hybrid (the all-to-all group inside cp)");
  r.need(c.cp > 1 || c.cp_layout == kDefaults.cp_layout || r.named("--cp-layout"), "--cp-layout ", c.cp_layout, " needs --cp > 1 (which tokens each cp rank holds)");
  if (c.cp > 1) {  // the layout's own rules (context_parallel/cp_layout.h)
    const std::string problem = cp_problem(c.seq_len, c.cp, parse_cp_layout(c.cp_layout));
    r.need(problem.empty(), problem);
  }
  if (c.cp > 1 && c.tp >= 1) {  // ring, ulysses or hybrid (context_parallel/ulysses.h): heads split over the all-to-all
    const std::string problem = cp_mode_problem(parse_cp_mode(c.cp_mode), c.cp, c.cp_ulysses, m.num_attention_heads / c.tp);
    r.need(problem.empty(), problem);
  }
}

}  // namespace

std::vector<std::string> check_flag_rules(const RunConfig& c, int world_size) {
  Rules r{flag_problems(c)};  // each flag's own value (its row's check, flag_table.cpp)
  tool_rules(r, c, world_size);
  output_rules(r, c);
  model_rules(r, c);
  mesh_rules(r, c, world_size);
  expert_rules(r, c);
  sequence_and_pipeline_rules(r, c);
  zero_rules(r, c);
  cp_rules(r, c);
  return r.errors;
}

}  // namespace picotron
