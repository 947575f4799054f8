// runtime/text/generate.cpp — see generate.h.
#include "runtime/text/generate.h"

#include "runtime/text/tokenizer.h"
#include "expert_parallel/moe.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/output/output_file.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <iostream>

#include "picotron/data.h"
#include "picotron/dtype.h"

namespace picotron {

std::vector<int64_t> continue_tokens(LlamaForCausalLM& model, const std::vector<int64_t>& prompt, int64_t max_new,
                                     int64_t stop_token, double temperature, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const auto device = model->parameters().front().device();
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<int64_t> tokens = prompt;
  for (int64_t i = 0; i < max_new; ++i) {
    auto input = torch::tensor(tokens, torch::kInt64).unsqueeze(0).to(device);  // [1, S]
    auto logits = model->forward(input)[0][-1].to(torch::kFloat32).cpu();       // [V]
    if (!torch::isfinite(logits).all().item<bool>()) break;  // a diverged model: no token to pick
    int64_t next;
    if (temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto probs = torch::softmax(logits / temperature, /*dim=*/0);
      next = torch::multinomial(probs, /*num_samples=*/1, /*replacement=*/false, gen).item<int64_t>();
    }
    tokens.push_back(next);
    if (next == stop_token) break;
  }
  return std::vector<int64_t>(tokens.begin() + int64_t(prompt.size()), tokens.end());
}

std::string bytes_to_text(const std::vector<int64_t>& tokens) {
  std::string out;
  for (int64_t t : tokens) {
    if (t == '\n') out += "\\n";
    else if (t >= 32 && t < 127) out += char(t);
    else { char buf[8]; std::snprintf(buf, sizeof(buf), "\\x%02x", int(t & 0xff)); out += buf; }
  }
  return out;
}

ArithmeticReport evaluate_arithmetic(LlamaForCausalLM& model, int total, int num_examples, uint64_t seed) {
  ArithmeticReport report;
  for (int k = 0; k < total; ++k) {
    const auto problem = arithmetic_problem(seed, k);
    std::vector<int64_t> prompt{'\n'};  // problems start after a newline in the training stream
    for (char ch : problem.prompt()) prompt.push_back(ch);
    const auto out = continue_tokens(model, prompt, /*max_new=*/4, /*stop_token=*/'\n', /*temperature=*/0.0, seed);
    std::string answer;
    for (int64_t t : out) if (t != '\n') answer += char(t);
    const bool ok = answer == problem.answer();
    report.correct += ok;
    ++report.total;
    if (int(report.examples.size()) < num_examples)
      report.examples.push_back(problem.prompt() + bytes_to_text(out) + (ok ? "   correct" : "   wrong (" + problem.answer() + ")"));
  }
  return report;
}

namespace {
std::string one_line(std::string text) {  // a sample on one line: newlines and tabs shown
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
  return out;
}
}  // namespace

bool prints_samples(const TextSettings& settings) {
  return settings.generate > 0 && (settings.data == "arithmetic" || settings.llama.vocab_size <= 256 || !settings.tokenizer.empty());
}

void print_samples(LlamaForCausalLM& model, const TextSettings& settings, const BatchLoader& loader) {
  model->eval();
  if (settings.data == "arithmetic") {
    const auto report = evaluate_arithmetic(model, /*total=*/100, settings.generate, settings.seed + 1);
    std::cout << "samples (greedy):\n";
    for (const auto& e : report.examples) std::cout << "  " << e << "\n";
    std::cout << "arithmetic accuracy: " << report.correct << "/" << report.total << " problems answered exactly"
              << std::endl;
  } else if (!settings.tokenizer.empty()) {  // text through the tokenizer: [prompt] continuation
    const Tokenizer tok = Tokenizer::load(settings.tokenizer);
    std::cout << "samples (temperature 0.8, " << settings.tokenizer << "):\n";
    for (int i = 0; i < settings.generate; ++i) {
      const int64_t n = std::min<int64_t>(8, settings.seq_len);
      const auto prompt = loader.micro_batch(settings.steps + i, 0, 0).inputs[0].narrow(0, 0, n).contiguous();
      std::vector<int64_t> p(prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + n);
      const auto out = continue_tokens(model, p, 48, -1, 0.8, settings.seed + i);
      std::cout << "  [" << one_line(tok.decode(p)) << "] " << one_line(tok.decode(out)) << "\n";
    }
    std::cout << std::flush;
  } else if (settings.llama.vocab_size <= 256) {
    std::cout << "samples (temperature 0.8):\n";
    for (int i = 0; i < settings.generate; ++i) {
      const int64_t n = std::min<int64_t>(8, settings.seq_len);
      // A prompt from rows no step trained on (step index past the last one).
      const auto prompt = loader.micro_batch(settings.steps + i, 0, 0).inputs[0].narrow(0, 0, n).contiguous();
      std::vector<int64_t> p(prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + n);
      const auto out = continue_tokens(model, p, 64, -1, 0.8, settings.seed + i);
      std::cout << "  [" << bytes_to_text(p) << "] " << bytes_to_text(out) << "\n";
    }
    std::cout << std::flush;
  }
}

void print_continuation(LlamaForCausalLM& model, const std::vector<int64_t>& prompt, int64_t max_new) {
  model->eval();
  const auto out = continue_tokens(model, prompt, max_new, /*stop_token=*/-1, /*temperature=*/0.0, /*seed=*/0);
  std::ostringstream o;
  o << "prompt ids:";
  for (int64_t id : prompt) o << " " << id;
  o << " ->";
  for (int64_t id : out) o << " " << id;
  if (model->config.vocab_size <= 256) o << "   [" << bytes_to_text(prompt) << "] " << bytes_to_text(out);
  std::cout << o.str() << std::endl;
}

void print_text_continuation(LlamaForCausalLM& model, const std::string& tokenizer, const std::string& prompt,
                             int64_t max_new) {
  model->eval();
  const Tokenizer tok = Tokenizer::load(tokenizer);
  const auto ids = tok.encode(prompt);
  if (ids.empty()) throw std::runtime_error("--prompt: the text encodes to no tokens");
  for (int64_t id : ids)
    if (id >= model->config.vocab_size)
      throw std::runtime_error("--prompt: token " + std::to_string(id) + " is not below the model's vocab_size " +
                               std::to_string(model->config.vocab_size) + " (another tokenizer?)");
  const auto out = continue_tokens(model, ids, max_new, /*stop_token=*/-1, /*temperature=*/0.0, /*seed=*/0);
  std::ostringstream o;
  o << "prompt (" << ids.size() << " tokens) + greedy continuation (" << out.size() << "):\n" << prompt << tok.decode(out)
    << "\nids:";
  for (int64_t id : ids) o << " " << id;
  o << " ->";
  for (int64_t id : out) o << " " << id;
  std::cout << o.str() << std::endl;
}

void print_eval(LlamaForCausalLM& model, const std::string& path, const std::string& logits_path) {
  std::ifstream in = open_input_file("--eval " + path, path);
  nlohmann::json j;
  std::vector<std::vector<int64_t>> rows;
  j = parse_json(in, "--eval " + path);  // (too deeply nested: its own line)
  try {
    for (const auto& row : j.at("input_ids"))  // integers only: get<int64_t> would truncate 2.5 to 2
      for (const auto& id : row)
        if (!id.is_number_integer()) throw std::runtime_error("token " + id.dump() + " is not an integer");
    rows = j.at("input_ids").get<std::vector<std::vector<int64_t>>>();
  } catch (const std::exception& e) {
    throw std::runtime_error("--eval " + path + ": not {\"input_ids\": [[ids...], ...]}: " + std::string(e.what()).substr(0, 100));
  }
  if (rows.empty() || rows[0].size() < 2) throw std::runtime_error("--eval " + path + ": needs rows of 2 or more ids");
  for (const auto& r : rows) {
    if (r.size() != rows[0].size()) throw std::runtime_error("--eval " + path + ": rows of different lengths");
    for (int64_t id : r)
      if (id < 0 || id >= model->config.vocab_size)
        throw std::runtime_error("--eval " + path + ": token " + std::to_string(id) + " is outside the vocabulary");
  }
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t b = int64_t(rows.size()), s = int64_t(rows[0].size());
  auto ids = torch::empty({b, s}, torch::kInt64);
  for (int64_t i = 0; i < b; ++i) std::copy(rows[i].begin(), rows[i].end(), ids[i].data_ptr<int64_t>());
  const auto device = model->parameters().front().device();
  const auto logits = model->forward(ids.to(device)).to(torch::kCPU, torch::kFloat64);  // [B, S, V]
  const int64_t v = logits.size(-1);
  const auto loss = torch::nn::functional::cross_entropy(logits.narrow(1, 0, s - 1).reshape({-1, v}),
                                                         ids.narrow(1, 1, s - 1).reshape({-1}));
  char line[128];
  std::snprintf(line, sizeof line, "eval: loss %.9g over %lld x %lld tokens of %s", loss.item<double>(), (long long)b,
                (long long)(s - 1), path.c_str());
  std::cout << line << std::endl;
  if (!logits_path.empty()) {
    const auto flat = logits.contiguous();
    const double* p = flat.data_ptr<double>();
    nlohmann::json out = {{"loss", loss.item<double>()},
                          {"logits", std::vector<std::vector<std::vector<double>>>(
                                         size_t(b), std::vector<std::vector<double>>(size_t(s), std::vector<double>(size_t(v))))}};
    for (int64_t i = 0; i < b; ++i)
      for (int64_t t = 0; t < s; ++t)
        for (int64_t k = 0; k < v; ++k) out["logits"][size_t(i)][size_t(t)][size_t(k)] = p[(i * s + t) * v + k];
    write_file("--eval-logits", logits_path, out.dump() + "\n");
  }
}

void use_whole_model(const TextSettings& settings, Optimizer& optimizer, const MeshShape& shape,
                     const ShardPlanOf& shard_plan_of, torch::Device device, Comm& world, const BatchLoader& loader) {
  if (!prints_samples(settings) && settings.eval.empty() && settings.prompt_ids.empty() && settings.prompt.empty()) return;
  const auto dtype = scalar_type(settings.dtype);
  const auto full = gather_full_tensors(state_of(optimizer, "sampling and --eval").weights_by_name(), settings.llama, shape, shard_plan_of, dtype, world);
  if (world.rank() != 0) return;
  const auto opts = torch::TensorOptions().device(device).dtype(dtype);
  LlamaForCausalLM whole(settings.llama, replicated_plan(settings.llama), opts);
  add_experts(*whole, replicated_plan(settings.llama), opts);  // a mixture of experts' blocks (none otherwise)
  load_parameters(*whole, full);
  if (!settings.eval.empty()) print_eval(whole, settings.eval, settings.eval_logits);
  if (!settings.prompt_ids.empty()) print_continuation(whole, settings.prompt_ids, settings.generate);
  else if (!settings.prompt.empty()) print_text_continuation(whole, settings.tokenizer, settings.prompt, settings.generate);
  else if (prints_samples(settings)) print_samples(whole, settings, loader);
}

}  // namespace picotron
