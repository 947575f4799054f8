// runtime/cli/settings.cpp — each piece's settings from the run's config. See settings.h.
#include "runtime/cli/settings.h"

namespace picotron {

LrSchedule lr_schedule(const TrainConfig& cfg) { return {cfg.lr, cfg.min_lr, cfg.warmup_steps, cfg.steps}; }

CpSettings cp_settings(const TrainConfig& cfg) {
  return {parse_cp_layout(cfg.cp_layout), parse_cp_mode(cfg.cp_mode), cfg.cp_ulysses};
}

nlohmann::json run_record(const TrainConfig& c) {
  const LlamaConfig& m = c.llama;
  return {{"model", c.model},
          {"hidden_size", m.hidden_size},
          {"intermediate_size", m.intermediate_size},
          {"num_hidden_layers", m.num_hidden_layers},
          {"num_attention_heads", m.num_attention_heads},
          {"num_key_value_heads", m.num_key_value_heads},
          {"vocab_size", m.vocab_size},
          {"rope_theta", m.rope_theta},
          {"max_position_embeddings", m.max_position_embeddings},
          {"rms_norm_eps", m.rms_norm_eps},
          {"tie_word_embeddings", m.tie_word_embeddings},
          {"num_local_experts", m.num_local_experts},
          {"num_experts_per_tok", m.num_experts_per_tok},
          {"dtype", precision_name(c.dtype)},
          {"steps", c.steps},
          {"lr", c.lr},
          {"warmup_steps", c.warmup_steps},
          {"min_lr", c.min_lr},
          {"weight_decay", c.weight_decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"seed", c.seed},
          {"data", c.data},
          {"seq_len", c.seq_len},
          {"global_batch_rows", c.micro_batch_size * c.grad_acc_steps * c.dp},
          {"mesh", {{"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"cp", c.cp}, {"zero", c.zero}}}};
}

CheckpointSettings checkpoint_settings(const TrainConfig& cfg) {
  return {cfg.save_dir, cfg.save_every, cfg.keep_checkpoints, cfg.async_save, cfg.resume, cfg.steps, run_record(cfg)};
}

WholeModelSettings whole_model_settings(const TrainConfig& cfg) { return {cfg.llama, cfg.save_params, cfg.export_hf}; }

TextSettings text_settings(const TrainConfig& cfg) {
  TextSettings s;  // field by field: six of them are strings, which a swap would not warn about
  s.llama = cfg.llama, s.dtype = cfg.dtype, s.generate = cfg.generate;
  s.data = cfg.data;
  s.tokenizer = cfg.tokenizer;
  s.seq_len = cfg.seq_len, s.steps = cfg.steps, s.seed = cfg.seed;
  s.eval = cfg.eval;
  s.eval_logits = cfg.eval_logits;
  s.prompt_ids = cfg.prompt_ids;
  s.prompt = cfg.prompt;
  return s;
}

RunLogSettings run_log_settings(const TrainConfig& cfg) {
  return {cfg.log_every, cfg.max_bad_steps, cfg.dtype == Precision::kFP16, cfg.metrics_file, cfg.memory_trace};
}

StepWatchSettings step_watch_settings(const TrainConfig& cfg) { return {cfg.grad_acc_steps, cfg.pp_schedule}; }

FlightSettings flight_settings(const TrainConfig& cfg) {
  std::string dir = cfg.flight_recorder;  // "off": none; "": beside the checkpoints, or ./flight
  if (dir == "off") dir.clear();
  else if (dir.empty()) dir = cfg.save_dir.empty() ? "flight" : cfg.save_dir + "/flight";
  return {dir, cfg.flight_entries, cfg.timeout_s, cfg.flight_dump_at_end};
}

ValidationSettings validation_settings(const TrainConfig& cfg) {
  return {cfg.eval_every, cfg.eval_batches, cfg.seed, cfg.seq_len, cfg.micro_batch_size, cfg.grad_acc_steps};
}

}  // namespace picotron
