// runtime/text/generate.h — sampling from a trained model (--generate N).
//
// No KV cache: each new token runs the whole (short) sequence again. Simple, and
// cheap at the lengths a tiny model is sampled at.
//
// For the default arithmetic data the samples are checked: the model completes
// "\na+b=" greedily up to the newline, and the report counts exact answers.
//
// Test: ctest -R cli.train_metrics (samples and accuracy of a short run)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "picotron/data.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/optim_state.h"
#include "runtime/checkpoint/checkpoint.h"

namespace picotron {

// Continue `prompt` by up to `max_new` tokens; stop after `stop_token` (-1: never).
// temperature 0 = greedy (argmax); otherwise sample from softmax(logits / temperature).
std::vector<int64_t> continue_tokens(LlamaForCausalLM& model, const std::vector<int64_t>& prompt, int64_t max_new,
                                     int64_t stop_token, double temperature, uint64_t seed);

struct ArithmeticReport {
  int correct = 0, total = 0;
  std::vector<std::string> examples;  // "17+45=62 ok", "3+8=10 wrong (11)"
};
// Ask `total` problems drawn with `seed` and check each answer. There are only 10,000
// possible problems and all of them occur in the training stream: the score measures
// how many answers the model has learned, not generalisation to unseen sums.
ArithmeticReport evaluate_arithmetic(LlamaForCausalLM& model, int total, int num_examples, uint64_t seed);

// What the end of a run's text reads of the run's flags (cut from them in runtime/cli/settings.h).
struct TextSettings {
  LlamaConfig llama;  // the model, rebuilt whole on rank 0
  Precision dtype = Precision::kFP32;  // --dtype: its weights
  int generate = 4;  // --generate N: samples, or the new tokens of --prompt / --prompt-ids
  std::string data;  // --data ("arithmetic": the answers are checked)
  std::string tokenizer;  // --tokenizer: samples and --prompt as text
  int64_t seq_len = 0;  // --seq-len, --steps: a sample's prompt is the first min(8, S) tokens
  int64_t steps = 0;  //   of a row no step trained on (step index --steps + i)
  uint64_t seed = 0;  // --seed: the samples' draws
  std::string eval, eval_logits;  // --eval, --eval-logits
  std::vector<int64_t> prompt_ids;  // --prompt-ids
  std::string prompt;  // --prompt
};

// Byte tokens -> printable text (non-printable bytes as \xNN, newlines as "\n").
std::string bytes_to_text(const std::vector<int64_t>& tokens);

// What --generate N prints after training, from a whole (single-process) model:
//   arithmetic data: N greedy answers and the exact-answer count over 100 problems;
//   --tokenizer: N continuations of prompts from the data, as text (runtime/text/tokenizer.h);
//   other byte-level data (V <= 256): N continuations of prompts from the data;
//   larger vocabularies without a tokenizer: nothing.
void print_samples(LlamaForCausalLM& model, const TextSettings& settings, const BatchLoader& loader);
// Whether print_samples prints anything for these settings (decided before gathering a
// whole model onto rank 0 for it). Pure: every rank gets the same answer.
bool prints_samples(const TextSettings& settings);
// --prompt-ids: "prompt ids: 1 2 3 -> 4 5 6" (greedy, `max_new` tokens; and the bytes when
// the vocabulary is bytes). Ids in, ids out (--prompt with --tokenizer takes text).
void print_continuation(LlamaForCausalLM& model, const std::vector<int64_t>& prompt, int64_t max_new);
// --prompt TEXT --tokenizer DIR: the text, encoded, continued greedily by max_new tokens,
// printed as text (the prompt included) and as ids.
void print_text_continuation(LlamaForCausalLM& model, const std::string& tokenizer, const std::string& prompt,
                             int64_t max_new);
// --eval F: the next-token loss on F's {"input_ids": [[...], ...]} (each row predicts its
// own next tokens: mean over B x (S-1)), printed; with `logits_path`, {"loss", "logits"
// [B][S][V]} written there as JSON.
void print_eval(LlamaForCausalLM& model, const std::string& path, const std::string& logits_path);

// The end of a run: samples, --eval, --prompt / --prompt-ids from a whole model on rank
// 0 (its weights gathered from every rank's shards, whatever the mesh trained). Collective
// over `world` when any of them is asked for; a no-op otherwise.
void use_whole_model(const TextSettings& settings, Optimizer& optimizer, const MeshShape& shape,
                     const ShardPlanOf& shard_plan_of, torch::Device device, Comm& world, const BatchLoader& loader);

}  // namespace picotron
