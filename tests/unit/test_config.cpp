// Presets reproduce published parameter counts exactly; validation names flags and numbers.
#include <catch2/catch.hpp>

#include "picotron/config.h"
#include "runtime/cli/flags.h"
#include "runtime/cli/settings.h"
#include "runtime/preflight/run_dir.h"

using namespace picotron;

TEST_CASE("presets have the published models' exact parameter counts", "[config]") {
  // Published totals: SmolLM (HuggingFaceTB) and Meta's Llama model cards / HF safetensors metadata.
  CHECK(count_parameters(preset("smollm-135m")) == 134515008);
  CHECK(count_parameters(preset("smollm-360m")) == 361821120);
  CHECK(count_parameters(preset("smollm-1.7b")) == 1711376384);
  CHECK(count_parameters(preset("llama2-7b")) == 6738415616);
  CHECK(count_parameters(preset("llama3-8b")) == 8030261248);
  CHECK(count_parameters(preset("llama3-70b")) == 70553706496);
  CHECK(count_parameters(preset("llama3.2-1b")) == 1235814400);
  CHECK(count_parameters(preset("llama3.2-3b")) == 3212749824);
  // tiny, by hand: embedding 256*128, 4 layers of (q,o 128*128; k,v 128*64; mlp 3*128*384; 2 norms), final norm
  CHECK(count_parameters(preset("tiny")) == 256 * 128 + 4 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 384 + 2 * 128) + 128);
}

TEST_CASE("unknown preset names --model and lists the known ones", "[config]") {
  CHECK_THROWS_WITH(preset("gpt5"), Catch::Contains("--model") && Catch::Contains("gpt5") && Catch::Contains("smollm-135m"));
  const char* argv[] = {"train", "--model", "gpt5"};
  auto r = parse_args(3, argv);
  CHECK_FALSE(r.config);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.message, Catch::Contains("--model"));
}

TEST_CASE("flags override preset fields and defaults are valid", "[config]") {
  const char* argv[] = {"train", "--model", "smollm-135m", "--hidden-size", "64", "--num-attention-heads", "4",
                        "--num-key-value-heads", "2", "--tie-word-embeddings=false", "--dtype", "fp64"};
  auto r = parse_args(12, argv);
  REQUIRE(r.config);
  CHECK(r.config->llama.hidden_size == 64);
  CHECK(r.config->llama.num_hidden_layers == 30);  // from the preset
  CHECK_FALSE(r.config->llama.tie_word_embeddings);
  CHECK(r.config->dtype == Precision::kFP64);
  const char* plain[] = {"train"};
  auto d = parse_args(1, plain);
  REQUIRE(d.config);
  CHECK(check_flag_rules(*d.config, 1).empty());
}

static std::vector<std::string> errors_for(std::vector<const char*> args, int world = 1) {
  args.insert(args.begin(), "train");
  auto r = parse_args(int(args.size()), args.data());
  REQUIRE(r.config);
  return check_flag_rules(*r.config, world);
}

static bool any_contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& e : v) if (e.find(s) != std::string::npos) return true;
  return false;
}

TEST_CASE("check_flag_rules reports bad sizes with the flag and the numbers", "[config]") {
  CHECK(any_contains(errors_for({"--hidden-size", "0"}), "--hidden-size must be > 0, got 0"));
  CHECK(any_contains(errors_for({"--micro-batch-size", "-3"}), "--micro-batch-size must be > 0, got -3"));
  CHECK(any_contains(errors_for({"--hidden-size", "130", "--num-attention-heads", "4"}),
                     "--hidden-size 130 is not divisible by --num-attention-heads 4"));
  CHECK(any_contains(errors_for({"--num-attention-heads", "4", "--num-key-value-heads", "3"}),
                     "--num-attention-heads 4 is not divisible by --num-key-value-heads 3"));
  CHECK(any_contains(errors_for({"--seq-len", "4096"}), "--seq-len 4096 exceeds --max-position-embeddings 2048"));
  // Several problems are all reported at once.
  CHECK(errors_for({"--steps", "0", "--lr", "-1"}).size() >= 2);
}

TEST_CASE("check_flag_rules checks the mesh against the world size", "[config]") {
  CHECK(any_contains(errors_for({"--dp", "2"}, 4), "--dp 2 x --pp 1 x --cp 1 x --tp 1 = 2 ranks, but the job has 4 processes"));
  CHECK(errors_for({"--dp", "4"}, 4).empty());
  CHECK(any_contains(errors_for({"--dp", "0"}, 1), "--dp must be >= 1, got 0"));
}

TEST_CASE("each piece's settings are cut from the flags field by field", "[config]") {
  TrainConfig cfg;
  cfg.data = "D.bin", cfg.tokenizer = "tok", cfg.eval = "e.json", cfg.eval_logits = "l.json", cfg.prompt = "hi";
  cfg.prompt_ids = {1, 2}, cfg.generate = 7, cfg.seq_len = 33, cfg.steps = 12, cfg.seed = 99;
  const TextSettings text = text_settings(cfg);
  CHECK(text.data == "D.bin");
  CHECK(text.tokenizer == "tok");
  CHECK(text.eval == "e.json");
  CHECK(text.eval_logits == "l.json");
  CHECK(text.prompt == "hi");
  CHECK(text.prompt_ids == std::vector<int64_t>{1, 2});
  CHECK((text.generate == 7 && text.seq_len == 33 && text.steps == 12 && text.seed == 99));

  // The flight recorder's directory: --flight-recorder, else <--save-dir>/flight, else flight/; off: none.
  CHECK(flight_settings(cfg).dir == "flight");
  cfg.save_dir = "ckpt";
  CHECK(flight_settings(cfg).dir == "ckpt/flight");
  cfg.flight_recorder = "rec";
  CHECK(flight_settings(cfg).dir == "rec");
  cfg.flight_recorder = "off";
  CHECK(flight_settings(cfg).dir.empty());
  CHECK(flight_settings(cfg).timeout_s == cfg.timeout_s);

  cfg.keep_checkpoints = 5, cfg.save_every = 3, cfg.resume = "old";
  const CheckpointSettings saving = checkpoint_settings(cfg);
  CHECK((saving.save_dir == "ckpt" && saving.keep == 5 && saving.save_every == 3 && saving.resume == "old"));
  CHECK(saving.run.at("hidden_size") == cfg.llama.hidden_size);  // the record a manifest keeps
  CHECK(saving.run.at("global_batch_rows") == cfg.micro_batch_size * cfg.grad_acc_steps * cfg.dp);
}

TEST_CASE("run dir: the outputs not given go under DIR, those given keep their paths", "[config]") {
  const char* argv[] = {"train", "--run-dir", "runs/a"};
  TrainConfig c;
  c.run_dir = "runs/a";
  c.metrics_file = "m.jsonl";  // given: kept
  apply_run_dir(c, 3, argv);
  CHECK(c.metrics_file == "m.jsonl");
  CHECK(c.memory_trace == "runs/a/memory.jsonl");
  CHECK(c.pp_trace.empty());  // --pp 1: no pipeline trace (check_flag_rules refuses one)
  CHECK(c.flight_recorder == "runs/a/flight");
  CHECK(c.flight_dump_at_end);
  CHECK(c.profile.empty());  // the profiler only when --profile-steps asks
  CHECK(c.command_line == "train --run-dir runs/a");
  TrainConfig p;
  p.run_dir = "d", p.pp = 2, p.flight_recorder = "off", p.profile_first = 2, p.profile_last = 2;
  apply_run_dir(p, 0, nullptr);
  CHECK(p.pp_trace == "d/pp_trace.json");
  CHECK(p.flight_recorder == "off");
  CHECK_FALSE(p.flight_dump_at_end);
  CHECK(p.profile == "d/profile");
  TrainConfig none;
  apply_run_dir(none, 0, nullptr);
  CHECK(none.metrics_file.empty());
}
