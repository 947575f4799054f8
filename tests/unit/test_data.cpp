// The loader's global batch depends only on (seed, step), however it is split; token
// files round-trip; bad files get one-line errors naming the file.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "picotron/data.h"

using namespace picotron;
namespace fs = std::filesystem;

namespace {

fs::path temp_path(const std::string& name) { return fs::temp_directory_path() / ("picotron_test_" + name); }

void write_bytes(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// The global batch of a step, reassembled from every (dp rank, micro-batch) slice.
torch::Tensor assembled(const BatchLoader& l, int64_t step, int64_t dp, int64_t acc) {
  std::vector<torch::Tensor> parts;
  for (int64_t d = 0; d < dp; ++d)
    for (int64_t m = 0; m < acc; ++m) parts.push_back(l.micro_batch(step, m, d).inputs);
  return torch::cat(parts);
}

}  // namespace

TEST_CASE("global batch depends only on (seed, step), not on the split", "[data]") {
  for (const std::string spec : {"arithmetic", "synthetic"}) {
    auto src = open_data(spec, 256, 16);
    BatchLoader one(src, 42, 16, /*B=*/8, /*acc=*/1, /*dp=*/1);
    BatchLoader split(src, 42, 16, /*B=*/2, /*acc=*/2, /*dp=*/2);
    BatchLoader other_split(src, 42, 16, /*B=*/1, /*acc=*/8, /*dp=*/1);
    for (int64_t step : {0, 5}) {
      auto reference = one.global_batch(step).inputs;  // [8, 16]
      CHECK(torch::equal(assembled(one, step, 1, 1), reference));
      CHECK(torch::equal(assembled(split, step, 2, 2), reference));
      CHECK(torch::equal(assembled(other_split, step, 1, 8), reference));
    }
    CHECK_FALSE(torch::equal(one.global_batch(0).inputs, one.global_batch(1).inputs));
    BatchLoader other_seed(src, 43, 16, 8, 1, 1);
    CHECK_FALSE(torch::equal(one.global_batch(0).inputs, other_seed.global_batch(0).inputs));
  }
}

TEST_CASE("targets are the inputs shifted by one token", "[data]") {
  auto src = open_data("arithmetic", 256, 32);
  BatchLoader l(src, 1, 32, 4, 1, 1);
  auto b = l.global_batch(3);
  CHECK(torch::equal(b.inputs.narrow(1, 1, 31), b.targets.narrow(1, 0, 31)));
  // Arithmetic text: only digits, '+', '=' and newlines.
  auto ok = (b.inputs >= '0').logical_and(b.inputs <= '9').logical_or(b.inputs == '+').logical_or(b.inputs == '=')
                .logical_or(b.inputs == '\n');
  CHECK(ok.all().item<bool>());
  const ArithmeticProblem p{17, 45};
  CHECK(p.prompt() == "17+45=");
  CHECK(p.answer() == "62");
  CHECK(ArithmeticProblem{3, 4}.answer() == "7");
}

// Every token of a memory-mapped --data source, in order.
static std::vector<int32_t> mapped_tokens(const std::shared_ptr<TokenSource>& source) {
  auto mapped = std::dynamic_pointer_cast<MappedSource>(source);
  REQUIRE(mapped);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < mapped->size(); ++i) out.push_back(int32_t(mapped->token(i)));
  return out;
}

TEST_CASE("token files: picotron format (2 and 4 bytes) and nanoGPT raw uint16", "[data]") {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 100; ++i) tokens.push_back((i * 37) % 1000);
  for (int width : {2, 4}) {
    auto p = temp_path("tok" + std::to_string(width) + ".bin");
    write_token_file(p.string(), tokens, width);
    CHECK(mapped_tokens(open_data(p.string(), 1000, 8)) == tokens);
  }
  auto raw = temp_path("raw.bin");
  std::string bytes;
  for (int32_t t : tokens) { uint16_t v = uint16_t(t); bytes.append(reinterpret_cast<const char*>(&v), 2); }
  write_bytes(raw, bytes);
  CHECK(mapped_tokens(open_data(raw.string(), 1000, 8)) == tokens);
  // A directory of shards is their concatenation in name order.
  auto dir = temp_path("shards");
  fs::create_directories(dir);
  write_token_file((dir / "a.bin").string(), {1, 2, 3, 4, 5}, 2);
  write_token_file((dir / "b.bin").string(), {6, 7, 8, 9}, 4);
  CHECK(mapped_tokens(open_data(dir.string(), 10, 4)) == std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("bad data files get one-line errors naming the file", "[data]") {
  CHECK_THROWS_WITH(open_data("/nonexistent/data.txt", 256, 8), Catch::Contains("/nonexistent/data.txt") && Catch::Contains("no such file"));
  auto empty = temp_path("empty.txt");
  write_bytes(empty, "");
  CHECK_THROWS_WITH(open_data(empty.string(), 256, 8), Catch::Contains("empty"));
  auto trunc = temp_path("trunc.bin");
  write_token_file(trunc.string(), std::vector<int32_t>(50, 3), 2);
  fs::resize_file(trunc, fs::file_size(trunc) - 10);
  CHECK_THROWS_WITH(open_data(trunc.string(), 256, 8), Catch::Contains("truncated") && Catch::Contains("50 tokens"));
  auto odd = temp_path("odd.bin");
  write_bytes(odd, "abc");
  CHECK_THROWS_WITH(open_data(odd.string(), 256, 8), Catch::Contains("odd size"));
  auto big = temp_path("big.bin");
  write_token_file(big.string(), std::vector<int32_t>(50, 300), 2);
  CHECK_THROWS_WITH(open_data(big.string(), 256, 8), Catch::Contains("token 300") && Catch::Contains("--vocab-size is 256"));
  auto small = temp_path("small.txt");
  write_bytes(small, "hello");
  CHECK_THROWS_WITH(open_data(small.string(), 256, 8), Catch::Contains("5 tokens, fewer than --seq-len + 1 = 9"));
}

TEST_CASE("a memory-mapped corpus gives the batches of the same tokens in memory", "[data]") {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 5000; ++i) tokens.push_back((i * 7919) % 256);
  auto p = temp_path("same.bin");
  write_token_file(p.string(), tokens, 2);
  const MemorySource in_memory(tokens, "memory");
  const auto mapped = open_data(p.string(), 256, 32);
  for (int64_t step : {0, 1, 17})
    CHECK(torch::equal(in_memory.rows(1234, step, 8, 2, 4, 33), mapped->rows(1234, step, 8, 2, 4, 33)));
}
