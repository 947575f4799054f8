// Parameter files round-trip by name; a missing or corrupt file gets one line naming it.
// Also the small measuring helpers of picotron/utils.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_format.h"
#include "runtime/checkpoint/safetensors.h"
#include "picotron/dtype.h"
#include "picotron/format.h"
#include "runtime/observe/measure.h"

using namespace picotron;

TEST_CASE("parameter files round-trip every tensor by name", "[checkpoint]") {
  const auto path = (std::filesystem::temp_directory_path() / "picotron_test_params.pt").string();
  NamedTensors tensors = {{"model.layers.0.mlp.up_proj.weight", torch::randn({3, 4}, torch::kFloat64)},
                          {"model.norm.weight", torch::ones({4})},
                          {"lm_head.weight", torch::randn({5, 4}).to(torch::kBFloat16)}};
  save_tensors(path, tensors);
  const auto loaded = load_tensors(path);
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(loaded.count(name));
    CHECK(loaded.at(name).scalar_type() == t.scalar_type());
    CHECK(torch::equal(loaded.at(name), t));
  }
}

TEST_CASE("checksums: the standard FNV-1a 64, and the older basis still recognised", "[checkpoint]") {
  // Published FNV-1a 64 values (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
  CHECK(fnv1a64("", 0) == 0xcbf29ce484222325ULL);
  CHECK(fnv1a64("a", 1) == 0xaf63dc4c8601ec8cULL);
  CHECK(fnv1a64("foobar", 6) == 0x85944171f73967e8ULL);
  const std::string older = checkpoint_format::hex(fnv1a64("foobar", 6, kOlderFnvOffsetBasis));
  CHECK(match_fnv1a64("foobar", 6, "85944171f73967e8") == SumMatch::kStandard);
  CHECK(match_fnv1a64("foobar", 6, older) == SumMatch::kOlder);  // a checkpoint saved before the fix
  CHECK(match_fnv1a64("foobaz", 6, "85944171f73967e8") == SumMatch::kNone);
}

TEST_CASE("missing and corrupt parameter files are named in the error", "[checkpoint]") {
  CHECK_THROWS_WITH(load_tensors("/nonexistent/params.pt"), Catch::Contains("/nonexistent/params.pt") && Catch::Contains("no such file"));
  const auto path = (std::filesystem::temp_directory_path() / "picotron_test_corrupt.pt").string();
  std::ofstream(path) << "this is not a parameter file";
  CHECK_THROWS_WITH(load_tensors(path), Catch::Contains(path) && Catch::Contains("corrupt"));
}

TEST_CASE("a parameter file whose payload was altered is refused, naming the tensor", "[checkpoint]") {
  const auto path = (std::filesystem::temp_directory_path() / "picotron_test_altered.safetensors").string();
  save_tensors(path, {{"model.norm.weight", torch::ones({64})}, {"lm_head.weight", torch::randn({5, 4})}});
  REQUIRE_NOTHROW(load_tensors(path));
  {  // flip one byte of the data section's last bytes (lm_head.weight or model.norm.weight's tail)
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(-3, std::ios::end);
    f.write(&c, 1);
  }
  CHECK_THROWS_WITH(load_tensors(path), Catch::Contains(path) && Catch::Contains("checksum mismatch in tensor"));
}

TEST_CASE("measure, format: FLOPs per token, thousands separators, byte sizes", "[measure][format]") {
  const LlamaConfig c = preset("smollm-135m");
  CHECK(flops_per_token(c, 2048) == Approx(6.0 * 134515008 + 12.0 * 30 * 576 * 2048));
  CHECK(with_commas(8030261248) == "8,030,261,248");
  CHECK(with_commas(999) == "999");
  CHECK(with_commas(-1000) == "-1,000");
  CHECK(human_bytes(1536) == "1.50 KiB");
  CHECK(device_peak_flops(torch::kCPU) == 0.0);
}

TEST_CASE("measure: the CPU tensor memory counter sees every allocation and free, and the peak", "[measure]") {
  count_cpu_tensor_memory();
  const torch::Device cpu(torch::kCPU);
  const int64_t before = current_memory_bytes(cpu);
  reset_peak_memory(cpu);
  {
    auto a = torch::empty({1000}, torch::kFloat64);  // 8,000 bytes
    CHECK(current_memory_bytes(cpu) - before == 8000);
    {
      auto b = torch::empty({250}, torch::kFloat32);  // 1,000 more
      CHECK(current_memory_bytes(cpu) - before == 9000);
    }
    CHECK(current_memory_bytes(cpu) - before == 8000);
  }
  CHECK(current_memory_bytes(cpu) == before);
  CHECK(peak_memory_bytes(cpu) - before == 9000);
  reset_peak_memory(cpu);
  CHECK(peak_memory_bytes(cpu) == before);
}

TEST_CASE("safetensors: layout on disk, metadata, and every broken file named", "[safetensors]") {
  const auto dir = std::filesystem::temp_directory_path();
  const auto path = (dir / "picotron_test.safetensors").string();
  write_safetensors(path, {{"a", torch::arange(6, torch::kFloat32).view({2, 3})}, {"b", torch::ones({1}, torch::kInt64)}},
                    {{"format", "pt"}});
  // 8-byte little-endian header length, then JSON; the data starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  CHECK(n % 8 == 0);
  CHECK(std::filesystem::file_size(path) == 8 + n + 6 * 4 + 8);
  const SafetensorsFile f(path);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(torch::equal(f.read("a"), torch::arange(6, torch::kFloat32).view({2, 3})));
  CHECK(f.read("b").scalar_type() == torch::kInt64);
  CHECK(fnv1a64(f.read("a")) != fnv1a64(f.read("a") + 1));
  // Truncated: the header is whole, the data is not.
  std::filesystem::resize_file(path, 8 + n + 10);
  CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("tensor 'a'") && Catch::Contains("truncated"));
  std::filesystem::resize_file(path, 5);
  CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains("truncated"));
  std::ofstream(path, std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0{not json at all", 24);
  CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("corrupt header"));
}

TEST_CASE("checkpoint names: steps past 999,999 are found and ordered as numbers", "[checkpoint]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("picotron_names_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (int64_t step : {999999, 1000000, 2, 10000000}) {
    fs::create_directories(dir / checkpoint_format::step_name(step));
    std::ofstream(dir / checkpoint_format::step_name(step) / "manifest.json") << "{}";
  }
  fs::create_directories(dir / "step-1000001");  // unfinished: no manifest
  fs::create_directories(dir / "step-12x4567");  // not a step
  CHECK(checkpoint_format::step_name(1000000) == "step-1000000");
  CHECK(checkpoint_format::finished_steps(dir) == std::vector<int64_t>{2, 999999, 1000000, 10000000});
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir)) {  // (no remove_all: see resume.cpp, remove_tree)
    for (const auto& f : fs::directory_iterator(entry.path())) fs::remove(f.path(), ec);
    fs::remove(entry.path(), ec);
  }
  fs::remove(dir, ec);
}
