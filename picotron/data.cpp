// picotron/data.cpp — see data.h for the batch layout and the file format.
#include "picotron/data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace picotron {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'P', 'I', 'C', 'O', 'T', 'O', 'K', '1'};
constexpr int64_t kHeaderBytes = 24;

// splitmix64 of a combined key: independent streams for (seed, step[, row]).
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::runtime_error data_error(const std::string& what) { return std::runtime_error("--data " + what); }

std::vector<char> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw data_error(path.string() + ": cannot open (missing or unreadable)");
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// Tokens of one .bin file: picotron's header format, or nanoGPT's raw uint16.
std::vector<int32_t> read_token_file(const fs::path& path) {
  const auto bytes = read_file(path);
  const std::string name = path.string();
  if (bytes.empty()) throw data_error(name + ": file is empty");
  std::vector<int32_t> tokens;
  if (bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0) {
    if (int64_t(bytes.size()) < kHeaderBytes) throw data_error(name + ": truncated header (" + std::to_string(bytes.size()) + " bytes)");
    uint32_t width = 0;
    uint64_t count = 0;
    std::memcpy(&width, bytes.data() + 8, 4);
    std::memcpy(&count, bytes.data() + 16, 8);
    if (width != 2 && width != 4) throw data_error(name + ": bytes per token is " + std::to_string(width) + ", expected 2 or 4");
    const uint64_t expected = kHeaderBytes + count * width;
    if (bytes.size() != expected)
      throw data_error(name + ": truncated or corrupt: header says " + std::to_string(count) + " tokens (" +
                       std::to_string(expected) + " bytes) but the file has " + std::to_string(bytes.size()) + " bytes");
    tokens.resize(count);
    const char* p = bytes.data() + kHeaderBytes;
    for (uint64_t i = 0; i < count; ++i) {
      if (width == 2) { uint16_t t; std::memcpy(&t, p + 2 * i, 2); tokens[i] = t; }
      else { uint32_t t; std::memcpy(&t, p + 4 * i, 4); tokens[i] = int32_t(t); }
    }
  } else {  // nanoGPT: headerless little-endian uint16
    if (bytes.size() % 2 != 0) throw data_error(name + ": truncated: raw uint16 file has an odd size (" + std::to_string(bytes.size()) + " bytes)");
    tokens.resize(bytes.size() / 2);
    for (size_t i = 0; i < tokens.size(); ++i) { uint16_t t; std::memcpy(&t, bytes.data() + 2 * i, 2); tokens[i] = t; }
  }
  if (tokens.empty()) throw data_error(name + ": holds no tokens");
  return tokens;
}

}  // namespace

// ---- sources ------------------------------------------------------------------------
MemorySource::MemorySource(std::vector<int32_t> tokens, std::string description)
    : tokens_(std::move(tokens)), description_(std::move(description)) {}

torch::Tensor MemorySource::rows(uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row,
                                 int64_t num_rows, int64_t row_len) const {
  // Offsets of ALL rows of the global batch come from one generator, so a row's window
  // does not depend on which rank asks for it.
  auto gen = at::detail::createCPUGenerator(mix(seed, uint64_t(step)));
  const int64_t max_start = int64_t(tokens_.size()) - row_len;  // inclusive
  auto starts = torch::randint(0, max_start + 1, {global_rows}, gen, torch::kInt64);  // [G]
  auto out = torch::empty({num_rows, row_len}, torch::kInt64);                         // [rows, S+1]
  auto o = out.accessor<int64_t, 2>();
  auto s = starts.accessor<int64_t, 1>();
  for (int64_t r = 0; r < num_rows; ++r)
    for (int64_t j = 0; j < row_len; ++j) o[r][j] = tokens_[s[first_row + r] + j];
  return out;
}

std::string SyntheticSource::describe() const {
  return "synthetic: uniform random tokens in [0, " + std::to_string(vocab_size_) + ")";
}

torch::Tensor SyntheticSource::rows(uint64_t seed, int64_t step, int64_t /*global_rows*/, int64_t first_row,
                                    int64_t num_rows, int64_t row_len) const {
  auto out = torch::empty({num_rows, row_len}, torch::kInt64);  // [rows, S+1]
  for (int64_t r = 0; r < num_rows; ++r) {  // one generator per row: cost follows the rows read
    auto gen = at::detail::createCPUGenerator(mix(mix(seed, uint64_t(step)), uint64_t(first_row + r)));
    out[r] = torch::randint(0, vocab_size_, {row_len}, gen, torch::kInt64);
  }
  return out;
}

// ---- arithmetic ---------------------------------------------------------------------
std::string ArithmeticProblem::prompt() const { return std::to_string(a) + "+" + std::to_string(b) + "="; }
std::string ArithmeticProblem::answer() const { return std::to_string(a + b); }

ArithmeticProblem arithmetic_problem(uint64_t seed, int64_t index) {
  const uint64_t x = mix(seed, uint64_t(index));
  return {int(x % 100), int((x >> 32) % 100)};
}

std::vector<int32_t> arithmetic_tokens(int64_t num_problems) {
  std::vector<int32_t> tokens;
  for (int64_t k = 0; k < num_problems; ++k) {
    const auto p = arithmetic_problem(/*seed=*/0, k);
    for (char ch : p.prompt() + p.answer() + "\n") tokens.push_back(static_cast<unsigned char>(ch));
  }
  return tokens;
}

// ---- opening --data -------------------------------------------------------------------
std::shared_ptr<TokenSource> open_data(const std::string& spec, int64_t vocab_size, int64_t seq_len) {
  if (spec == "synthetic") return std::make_shared<SyntheticSource>(vocab_size);
  std::vector<int32_t> tokens;
  std::string description;
  if (spec == "arithmetic") {
    tokens = arithmetic_tokens(/*num_problems=*/200000);
    description = "arithmetic: 200000 generated problems 'a+b=c' (a, b in [0, 99]), byte tokens";
  } else if (fs::is_directory(spec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(spec))
      if (e.path().extension() == ".bin") files.push_back(e.path());
    if (files.empty()) throw data_error(spec + ": directory holds no .bin token files");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      auto part = read_token_file(f);
      tokens.insert(tokens.end(), part.begin(), part.end());
    }
    description = spec + ": " + std::to_string(files.size()) + " token files";
  } else if (!fs::exists(spec)) {
    throw data_error(spec + ": no such file or directory (or use arithmetic | synthetic)");
  } else if (fs::path(spec).extension() == ".bin") {
    tokens = read_token_file(spec);
    description = spec + ": token file";
  } else {
    const auto bytes = read_file(spec);
    if (bytes.empty()) throw data_error(spec + ": file is empty");
    tokens.reserve(bytes.size());
    for (char ch : bytes) tokens.push_back(static_cast<unsigned char>(ch));
    description = spec + ": text, byte tokens";
  }
  const auto [min_it, max_it] = std::minmax_element(tokens.begin(), tokens.end());
  const int32_t max_token = *max_it;
  if (*min_it < 0)  // a 4-byte token >= 2^31
    throw data_error(spec + ": holds token " + std::to_string(uint32_t(*min_it)) + ", beyond any vocabulary");
  if (max_token >= vocab_size)
    throw data_error(spec + ": holds token " + std::to_string(max_token) + " but --vocab-size is " + std::to_string(vocab_size));
  if (int64_t(tokens.size()) < seq_len + 1)
    throw data_error(spec + ": has " + std::to_string(tokens.size()) + " tokens, fewer than --seq-len + 1 = " +
                     std::to_string(seq_len + 1));
  description += " (" + std::to_string(tokens.size()) + " tokens)";
  return std::make_shared<MemorySource>(std::move(tokens), description);
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens, int bytes_per_token) {
  TORCH_CHECK(bytes_per_token == 2 || bytes_per_token == 4, "bytes_per_token must be 2 or 4, got ", bytes_per_token);
  std::ofstream out(path, std::ios::binary);
  TORCH_CHECK(out, "cannot write ", path);
  const uint32_t width = uint32_t(bytes_per_token), reserved = 0;
  const uint64_t count = tokens.size();
  out.write(kMagic, sizeof(kMagic));
  out.write(reinterpret_cast<const char*>(&width), 4);
  out.write(reinterpret_cast<const char*>(&reserved), 4);
  out.write(reinterpret_cast<const char*>(&count), 8);
  for (int32_t t : tokens) {
    if (width == 2) { uint16_t v = uint16_t(t); out.write(reinterpret_cast<const char*>(&v), 2); }
    else { uint32_t v = uint32_t(t); out.write(reinterpret_cast<const char*>(&v), 4); }
  }
}

// ---- the loader ---------------------------------------------------------------------
BatchLoader::BatchLoader(std::shared_ptr<TokenSource> source, uint64_t seed, int64_t seq_len,
                         int64_t micro_batch_size, int64_t grad_acc_steps, int64_t dp_size, int64_t dp_rank)
    : source_(std::move(source)), seed_(seed), seq_len_(seq_len), micro_batch_size_(micro_batch_size),
      grad_acc_steps_(grad_acc_steps), dp_size_(dp_size), dp_rank_(dp_rank) {
  TORCH_CHECK(dp_rank >= 0 && dp_rank < dp_size, "dp rank ", dp_rank, " out of [0, ", dp_size, ")");
}

Batch BatchLoader::slice(int64_t step, int64_t first_row, int64_t num_rows) const {
  auto rows = source_->rows(seed_, step, global_batch_rows(), first_row, num_rows, seq_len_ + 1);  // [n, S+1]
  return {rows.narrow(1, 0, seq_len_), rows.narrow(1, 1, seq_len_), {}};  // [n, S] each; all positions
}

Batch BatchLoader::global_batch(int64_t step) const { return slice(step, 0, global_batch_rows()); }

Batch BatchLoader::micro_batch(int64_t step, int64_t micro, int64_t dp_rank) const {
  TORCH_CHECK(micro >= 0 && micro < grad_acc_steps_, "micro-batch ", micro, " out of [0, ", grad_acc_steps_, ")");
  TORCH_CHECK(dp_rank >= 0 && dp_rank < dp_size_, "dp rank ", dp_rank, " out of [0, ", dp_size_, ")");
  Batch batch = slice(step, (dp_rank * grad_acc_steps_ + micro) * micro_batch_size_, micro_batch_size_);
  if (positions_.defined())  // this cp rank's tokens of each sequence, and their targets
    batch = {batch.inputs.index_select(1, positions_), batch.targets.index_select(1, positions_), positions_};
  return batch;
}

void BatchLoader::keep_positions(const std::vector<int64_t>& positions) {
  for (int64_t p : positions) TORCH_CHECK(p >= 0 && p < seq_len_, "position ", p, " is outside the sequence");
  positions_ = torch::tensor(positions, torch::kInt64);  // [n]
}

}  // namespace picotron
