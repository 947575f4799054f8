// picotron/config_validate.cpp — see config.h: validate (every problem with a config, one
// line each, naming the flag and the numbers) and config_fields (every setting as text,
// for the ranks to compare at start). Parsing the flags: config.cpp.
#include <cmath>
#include <sstream>
#include <tuple>

#include "picotron/config.h"
#include "pipeline_parallel/schedules.h"
#include "context_parallel/cp_layout.h"

namespace picotron {

std::vector<std::pair<std::string, std::string>> config_fields(const TrainConfig& c) {
  auto t = [](auto v) { std::ostringstream o; o.precision(17); o << v; return o.str(); };
  const LlamaConfig& m = c.llama;
  std::string ids;
  for (int64_t id : c.prompt_ids) ids += t(id) + ",";
  return {{"--model", c.model}, {"--hidden-size", t(m.hidden_size)}, {"--intermediate-size", t(m.intermediate_size)},
          {"--num-hidden-layers", t(m.num_hidden_layers)}, {"--num-attention-heads", t(m.num_attention_heads)},
          {"--num-key-value-heads", t(m.num_key_value_heads)}, {"--vocab-size", t(m.vocab_size)},
          {"--rope-theta", t(m.rope_theta)}, {"--max-position-embeddings", t(m.max_position_embeddings)},
          {"--rms-norm-eps", t(m.rms_norm_eps)}, {"--tie-word-embeddings", t(m.tie_word_embeddings)},
          {"--init-from", c.init_from}, {"--device", c.device}, {"--dtype", precision_name(c.dtype)},
          {"--seq-len", t(c.seq_len)}, {"--micro-batch-size", t(c.micro_batch_size)},
          {"--grad-acc-steps", t(c.grad_acc_steps)}, {"--steps", t(c.steps)}, {"--lr", t(c.lr)},
          {"--warmup-steps", t(c.warmup_steps)}, {"--min-lr", t(c.min_lr)}, {"--weight-decay", t(c.weight_decay)},
          {"--beta1", t(c.beta1)}, {"--beta2", t(c.beta2)}, {"--adam-eps", t(c.adam_eps)},
          {"--grad-clip", t(c.grad_clip)}, {"--max-bad-steps", t(c.max_bad_steps)}, {"--init-std", t(c.init_std)},
          {"--seed", t(c.seed)}, {"--data", c.data}, {"--dp", t(c.dp)}, {"--tp", t(c.tp)}, {"--pp", t(c.pp)},
          {"--cp", t(c.cp)}, {"--sp", t(c.sp)}, {"--pp-schedule", c.pp_schedule},
          {"--pp-virtual-stages", t(c.pp_virtual_stages)}, {"--pp-trace", c.pp_trace}, {"--recompute", c.recompute}, {"--kernels", c.kernels},
          {"--cp-layout", c.cp_layout}, {"--zero", t(c.zero)}, {"--zero-offload", t(c.zero_offload)},
          {"--dp-mode", dp_mode_name(c.dp_mode)}, {"--dp-bucket-mb", t(c.dp_bucket_mb)}, {"--timeout-s", t(c.timeout_s)},
          {"--metrics-file", c.metrics_file}, {"--memory-trace", c.memory_trace}, {"--save-params", c.save_params},
          {"--save-dir", c.save_dir}, {"--save-every", t(c.save_every)}, {"--keep-checkpoints", t(c.keep_checkpoints)},
          {"--resume", c.resume}, {"--stop-at-step", t(c.stop_at_step)}, {"--export-hf", c.export_hf},
          {"--eval", c.eval}, {"--eval-logits", c.eval_logits}, {"--prompt-ids", ids}, {"--log-every", t(c.log_every)},
          {"--comm-report", t(c.comm_report)}, {"--generate", t(c.generate)}};
}

std::vector<std::string> validate(const TrainConfig& c, int world_size) {
  std::vector<std::string> errors;
  auto need = [&](bool ok, const std::string& msg) { if (!ok) errors.push_back(msg); };
  auto str = [](auto v) { std::ostringstream o; o << v; return o.str(); };
  const LlamaConfig& m = c.llama;
  auto positive = [&](const char* flag, int64_t v) { need(v > 0, std::string(flag) + " must be > 0, got " + str(v)); };
  positive("--hidden-size", m.hidden_size);
  positive("--intermediate-size", m.intermediate_size);
  positive("--num-hidden-layers", m.num_hidden_layers);
  positive("--num-attention-heads", m.num_attention_heads);
  positive("--num-key-value-heads", m.num_key_value_heads);
  positive("--vocab-size", m.vocab_size);
  positive("--max-position-embeddings", m.max_position_embeddings);
  positive("--seq-len", c.seq_len);
  positive("--micro-batch-size", c.micro_batch_size);
  positive("--grad-acc-steps", c.grad_acc_steps);
  need(!(c.kernels == "fused" && c.device == "cpu"),
       "--kernels fused runs the CUDA kernels of kernels/: it needs --device cuda (on the CPU: --kernels aten)");
  need(!(c.kernels == "fused" && c.dtype_given && c.dtype == Precision::kFP64),
       "--kernels fused takes bf16, fp16 or fp32 (--dtype fp64 runs with --kernels aten)");
  need(c.steps >= 0, "--steps must be >= 0 (0: no training: --eval, --generate, --export-hf only), got " + str(c.steps));
  // Upper bounds: far above any model this program can train, low enough that every
  // product of sizes below (rows, tokens, parameters, bytes) fits in 64 bits.
  for (auto [flag, v, most] : {std::tuple{"--hidden-size", m.hidden_size, int64_t(1) << 16},
                               {"--intermediate-size", m.intermediate_size, int64_t(1) << 20},
                               {"--num-hidden-layers", m.num_hidden_layers, int64_t(1) << 10},
                               {"--num-attention-heads", m.num_attention_heads, int64_t(1) << 12},
                               {"--num-key-value-heads", m.num_key_value_heads, int64_t(1) << 12},
                               {"--vocab-size", m.vocab_size, int64_t(1) << 24},
                               {"--max-position-embeddings", m.max_position_embeddings, int64_t(1) << 24},
                               {"--seq-len", c.seq_len, int64_t(1) << 24},
                               {"--micro-batch-size", c.micro_batch_size, int64_t(1) << 20},
                               {"--grad-acc-steps", c.grad_acc_steps, int64_t(1) << 20},
                               {"--steps", c.steps, int64_t(1) << 40},
                               {"--threads", int64_t(c.threads), int64_t(1) << 12},
                               {"--generate", int64_t(c.generate), int64_t(1) << 20},
                               {"--dp", int64_t(c.dp), int64_t(1) << 16}, {"--tp", int64_t(c.tp), int64_t(1) << 16},
                               {"--pp", int64_t(c.pp), int64_t(1) << 16}, {"--cp", int64_t(c.cp), int64_t(1) << 16},
                               {"--pp-virtual-stages", int64_t(c.pp_virtual_stages), int64_t(1) << 10},
                               {"--timeout-s", int64_t(c.timeout_s), int64_t(7) * 24 * 3600},
                               {"--keep-checkpoints", int64_t(c.keep_checkpoints), int64_t(1) << 20}})
    need(v <= most, std::string(flag) + " must be <= " + str(most) + ", got " + str(v));
  need(!(c.dp_bucket_mb > 1 << 20), "--dp-bucket-mb must be <= 1048576, got " + str(c.dp_bucket_mb));
  // Products of the (bounded) sizes: rows and tokens of a step.
  if (c.micro_batch_size > 0 && c.grad_acc_steps > 0 && c.dp > 0 && c.seq_len > 0) {
    int64_t rows = 0, tokens = 0;
    const bool overflow = __builtin_mul_overflow(c.micro_batch_size, c.grad_acc_steps, &rows) ||
                          __builtin_mul_overflow(rows, int64_t(c.dp), &rows) ||
                          __builtin_mul_overflow(rows, c.seq_len, &tokens);
    need(!overflow && tokens <= int64_t(1) << 40,
         "--micro-batch-size x --grad-acc-steps x --dp x --seq-len = the tokens of a step must be <= 2^40 (got " +
             (overflow ? std::string("more than 2^63") : str(tokens)) + ")");
  }
  need(c.log_every >= 0, "--log-every must be >= 0 (0: automatic), got " + str(c.log_every));
  positive("--timeout-s", c.timeout_s);
  need(c.max_bad_steps >= 1, "--max-bad-steps must be >= 1, got " + str(c.max_bad_steps));
  need(c.eval_logits.empty() || !c.eval.empty(), "--eval-logits needs --eval");
  for (int64_t id : c.prompt_ids)
    need(id < m.vocab_size, "--prompt-ids: token " + str(id) + " is not below --vocab-size " + str(m.vocab_size));
  need(c.save_every >= 0, "--save-every must be >= 0 (0: only at the end), got " + str(c.save_every));
  need(c.save_every == 0 || !c.save_dir.empty(), "--save-every " + str(c.save_every) + " needs --save-dir");
  need(c.keep_checkpoints >= 1, "--keep-checkpoints must be >= 1, got " + str(c.keep_checkpoints));
  need(c.stop_at_step >= 0 && c.stop_at_step <= c.steps,
       "--stop-at-step must be in [0, --steps = " + str(c.steps) + "], got " + str(c.stop_at_step));
  if (m.hidden_size > 0 && m.num_attention_heads > 0) {
    need(m.hidden_size % m.num_attention_heads == 0,
         "--hidden-size " + str(m.hidden_size) + " is not divisible by --num-attention-heads " + str(m.num_attention_heads));
    need(m.head_dim() % 2 == 0 || m.hidden_size % m.num_attention_heads != 0,
         "--hidden-size " + str(m.hidden_size) + " / --num-attention-heads " + str(m.num_attention_heads) +
             " = head dim " + str(m.head_dim()) + ", which must be even for RoPE");
  }
  if (m.num_attention_heads > 0 && m.num_key_value_heads > 0)
    need(m.num_attention_heads % m.num_key_value_heads == 0,
         "--num-attention-heads " + str(m.num_attention_heads) + " is not divisible by --num-key-value-heads " +
             str(m.num_key_value_heads));
  for (auto [flag, v] : {std::pair{"--rope-theta", m.rope_theta}, {"--rms-norm-eps", m.rms_norm_eps}, {"--lr", c.lr},
                         {"--min-lr", c.min_lr}, {"--weight-decay", c.weight_decay}, {"--beta1", c.beta1},
                         {"--beta2", c.beta2}, {"--adam-eps", c.adam_eps}, {"--grad-clip", c.grad_clip},
                         {"--init-std", c.init_std}, {"--dp-bucket-mb", c.dp_bucket_mb}})
    need(std::isfinite(v), std::string(flag) + " must be a finite number, got " + str(v));
  need(c.warmup_steps < c.steps || c.steps <= 0,
       "--warmup-steps " + str(c.warmup_steps) + " must be smaller than --steps " + str(c.steps));
  need(m.rope_theta > 0, "--rope-theta must be > 0, got " + str(m.rope_theta));
  need(m.rms_norm_eps > 0, "--rms-norm-eps must be > 0, got " + str(m.rms_norm_eps));
  need(c.seq_len <= m.max_position_embeddings,
       "--seq-len " + str(c.seq_len) + " exceeds --max-position-embeddings " + str(m.max_position_embeddings));
  need(c.lr > 0, "--lr must be > 0, got " + str(c.lr));
  need(c.min_lr >= 0 && c.min_lr <= c.lr, "--min-lr must be in [0, --lr " + str(c.lr) + "], got " + str(c.min_lr));
  need(c.warmup_steps >= 0, "--warmup-steps must be >= 0, got " + str(c.warmup_steps));
  need(c.weight_decay >= 0, "--weight-decay must be >= 0, got " + str(c.weight_decay));
  need(c.beta1 >= 0 && c.beta1 < 1, "--beta1 must be in [0, 1), got " + str(c.beta1));
  need(c.beta2 >= 0 && c.beta2 < 1, "--beta2 must be in [0, 1), got " + str(c.beta2));
  need(c.adam_eps > 0, "--adam-eps must be > 0, got " + str(c.adam_eps));
  need(c.grad_clip >= 0, "--grad-clip must be >= 0 (0: off), got " + str(c.grad_clip));
  need(c.init_std > 0, "--init-std must be > 0, got " + str(c.init_std));
  need(c.threads >= 0, "--threads must be >= 0, got " + str(c.threads));
  need(c.generate >= 0, "--generate must be >= 0, got " + str(c.generate));
  need(c.dp_bucket_mb > 0, "--dp-bucket-mb must be > 0, got " + str(c.dp_bucket_mb));
  for (auto [flag, v] : {std::pair{"--dp", c.dp}, {"--tp", c.tp}, {"--pp", c.pp}, {"--cp", c.cp}})
    need(v >= 1, std::string(flag) + " must be >= 1, got " + str(v));
  if (c.dp >= 1 && c.tp >= 1 && c.pp >= 1 && c.cp >= 1) {
    const int64_t product = int64_t(c.dp) * c.pp * c.cp * c.tp;
    need(product == world_size, "--dp " + str(c.dp) + " x --pp " + str(c.pp) + " x --cp " + str(c.cp) + " x --tp " +
                                    str(c.tp) + " = " + str(product) + " ranks, but the job has " + str(world_size) +
                                    " processes");
  }
  if (c.tp > 1) {  // every rank holds whole heads, whole MLP columns, whole vocabulary rows
    for (auto [flag, v] : {std::pair{"--num-attention-heads", m.num_attention_heads},
                           {"--intermediate-size", m.intermediate_size}, {"--vocab-size", m.vocab_size}})
      need(v % c.tp == 0, std::string(flag) + " " + str(v) + " is not divisible by --tp " + str(c.tp));
    need(m.num_key_value_heads % c.tp == 0,
         "--num-key-value-heads " + str(m.num_key_value_heads) + " is not divisible by --tp " + str(c.tp) +
             " (grouped-query attention: every tp rank needs whole key/value heads; use --tp <= " +
             str(m.num_key_value_heads) + " dividing it, or more --num-key-value-heads)");
  }
  if (c.sp) {
    need(c.tp > 1, "--sp needs --tp > 1 (it splits the sequence over the tensor-parallel ranks), got --tp " + str(c.tp));
    need(c.tp < 1 || c.seq_len % c.tp == 0, "--seq-len " + str(c.seq_len) + " is not divisible by --tp " + str(c.tp) +
                                                " (--sp splits the sequence over tp)");
  }
  need(c.pp_virtual_stages >= 1, "--pp-virtual-stages must be >= 1, got " + str(c.pp_virtual_stages));
  if (c.pp > 1 && c.pp_virtual_stages >= 1) {
    const std::string problem =
        schedule_problem(parse_schedule(c.pp_schedule), c.pp, int(c.grad_acc_steps), c.pp_virtual_stages, m.num_hidden_layers);
    need(problem.empty(), problem);
  }
  need(c.pp > 1 || c.pp_trace.empty(), "--pp-trace needs --pp > 1 (it records the pipeline's actions)");
  need(c.pp > 1 || c.pp_virtual_stages == 1, "--pp-virtual-stages needs --pp > 1");
  need(c.pp > 1 || c.pp_schedule == TrainConfig{}.pp_schedule, "--pp-schedule needs --pp > 1");
  need(c.pp == 1 || c.device != "cuda",
       "--pp " + str(c.pp) + " runs on --device cpu only (multi-GPU pipelines are not implemented: one GPU is all "
       "this project can test on)");
  need(c.zero >= 0 && c.zero <= 3, "--zero must be 0, 1, 2 or 3, got " + str(c.zero));
  // Stages 2 and 3 keep no full gradient, but --sp's norm gains and a pipeline's tied
  // embedding are summed from full gradients before the sync; stage 3 would also gather
  // every layer of every micro-batch of a pipeline schedule (see zero/README.md).
  need(c.zero < 2 || (c.pp == 1 && !c.sp),
       "--zero " + str(c.zero) + " does not combine with --pp or --sp (use --zero 1)");
  need(!c.zero_offload || c.zero >= 1, "--zero-offload needs --zero 1, 2 or 3 (it offloads ZeRO's optimizer slice)");
  need(!c.zero_offload || c.device != "cpu",
       "--zero-offload moves the optimizer from the GPU to the CPU: it needs --device cuda (on --device cpu everything "
       "is on the CPU already)");
  if (c.cp > 1) {
    const std::string problem = cp_problem(c.seq_len, c.cp, parse_cp_layout(c.cp_layout));
    need(problem.empty(), problem);
  }
  return errors;
}

}  // namespace picotron
