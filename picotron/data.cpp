// picotron/data.cpp — see data.h for the batch layout and the file format.
#include "picotron/data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>


namespace picotron {

namespace fs = std::filesystem;

namespace {

// splitmix64 of a combined key: independent streams for (seed, step[, row]).
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::runtime_error data_error(const std::string& what) { return std::runtime_error("--data " + what); }

torch::Tensor window_starts(uint64_t seed, int64_t step, int64_t tokens, int64_t row_len, int64_t global_rows) {
  auto gen = at::detail::createCPUGenerator(mix(seed, uint64_t(step)));
  const int64_t max_start = tokens - row_len;  // inclusive
  return torch::randint(0, max_start + 1, {global_rows}, gen, torch::kInt64);  // [G]
}

// ---- sources (memory-mapped files: data_mapped.cpp) -----------------------------------
MemorySource::MemorySource(std::vector<int32_t> tokens, std::string description)
    : tokens_(std::move(tokens)), description_(std::move(description)) {}

torch::Tensor MemorySource::rows(uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row,
                                 int64_t num_rows, int64_t row_len) const {
  auto starts = window_starts(seed, step, int64_t(tokens_.size()), row_len, global_rows);  // [G]
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
  std::shared_ptr<TokenSource> source;
  int64_t size = 0;
  if (spec == "arithmetic") {
    auto tokens = arithmetic_tokens(/*num_problems=*/200000);
    size = int64_t(tokens.size());
    const int32_t max_token = *std::max_element(tokens.begin(), tokens.end());
    if (max_token >= vocab_size)
      throw data_error(spec + ": holds token " + std::to_string(max_token) + " but --vocab-size is " + std::to_string(vocab_size));
    source = std::make_shared<MemorySource>(std::move(tokens), "arithmetic: 200000 generated problems 'a+b=c' "
                                            "(a, b in [0, 99]), byte tokens (" + std::to_string(size) + " tokens)");
  } else {
    std::error_code ec;
    const auto status = fs::status(spec, ec);
    std::vector<MappedSource::File> files;
    std::string description;
    if (fs::is_directory(status)) {
      std::vector<fs::path> paths;
      fs::directory_iterator it(spec, ec), end;
      if (ec) throw data_error(spec + ": cannot list the directory: " + ec.message());
      for (; it != end; it.increment(ec)) {
        if (ec) throw data_error(spec + ": cannot list the directory: " + ec.message());
        if (it->path().extension() == ".bin") paths.push_back(it->path());
      }
      if (paths.empty()) throw data_error(spec + ": directory holds no .bin token files");
      std::sort(paths.begin(), paths.end());
      for (const auto& p : paths) files.push_back(MappedSource::describe_file(p.string(), /*token_file=*/true));
      description = spec + ": " + std::to_string(files.size()) + " token files";
    } else if (!fs::exists(status) && fs::is_symlink(fs::symlink_status(spec, ec))) {
      throw data_error(spec + ": a symbolic link to " + fs::read_symlink(spec, ec).string() + ", which does not exist");
    } else if (!fs::exists(status)) {
      throw data_error(spec + ": no such file or directory (or use arithmetic | synthetic)");
    } else {
      const bool token_file = fs::path(spec).extension() == ".bin";
      files.push_back(MappedSource::describe_file(spec, token_file));
      description = spec + (token_file ? ": token file" : ": text, byte tokens");
    }
    auto mapped = std::make_shared<MappedSource>(files, vocab_size, description);
    size = mapped->size();
    source = mapped;
  }
  if (size < seq_len + 1)
    throw data_error(spec + ": has " + std::to_string(size) + " tokens, fewer than --seq-len + 1 = " +
                     std::to_string(seq_len + 1));
  return source;
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens, int bytes_per_token) {
  TORCH_CHECK(bytes_per_token == 2 || bytes_per_token == 4, "bytes_per_token must be 2 or 4, got ", bytes_per_token);
  std::ofstream out(path, std::ios::binary);
  TORCH_CHECK(out, "cannot write ", path);
  const uint32_t width = uint32_t(bytes_per_token), reserved = 0;
  const uint64_t count = tokens.size();
  out.write(kTokenFileMagic, sizeof(kTokenFileMagic));
  out.write(reinterpret_cast<const char*>(&width), 4);
  out.write(reinterpret_cast<const char*>(&reserved), 4);
  out.write(reinterpret_cast<const char*>(&count), 8);
  for (int32_t t : tokens) {
    if (width == 2) { uint16_t v = uint16_t(t); out.write(reinterpret_cast<const char*>(&v), 2); }
    else { uint32_t v = uint32_t(t); out.write(reinterpret_cast<const char*>(&v), 4); }
  }
  out.close();
  TORCH_CHECK(out.good(), "writing ", path, " failed (a full disk or a size limit?)");  // never a silent short file
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
