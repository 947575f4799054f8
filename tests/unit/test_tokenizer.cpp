// The byte-level BPE tokenizer (runtime/text/tokenizer.h) on a tokenizer.json small enough to
// follow by hand; data.tokenizer_vs_library checks real ones against the tokenizers library.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "runtime/text/tokenizer.h"

using namespace picotron;

namespace {

// "Ġ" is how a space byte prints in byte-level BPE (byte_to_char()[' ']).
Tokenizer tiny(const std::string& merges) {
  const std::string path = (std::filesystem::temp_directory_path() / ("picotron_tokenizer_" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(path) << R"({"version": "1.0", "normalizer": null, "added_tokens": [{"id": 10, "content": "<|endoftext|>"}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "model": {"type": "BPE", "vocab": {"l": 0, "o": 1, "w": 2, "e": 3, "r": 4, "Ġ": 5, "lo": 6, "low": 7, "er": 8,
                                       "Ġlow": 9, "ow": 11},
              "merges": )" << merges << "}}";
  Tokenizer t = Tokenizer::load(path);
  std::remove(path.c_str());
  return t;
}

}  // namespace

TEST_CASE("tokenizer: bytes print as GPT-2's characters and back", "[tokenizer]") {
  CHECK(byte_to_char()['a'] == "a");
  CHECK(byte_to_char()[' '] == "Ġ");   // U+0120 = 256 + 32: space is the 33rd byte that does not print
  CHECK(byte_to_char()['\n'] == "Ċ");  // U+010A
  for (int b = 0; b < 256; ++b) CHECK(char_to_byte().at(byte_to_char()[b]) == b);
}

TEST_CASE("tokenizer: BPE merges the lowest-ranked pair first, until none applies", "[tokenizer]") {
  // "lower low" -> words "lower", " low" -> l o w e r | Ġ l o w
  //   l o (rank 0) -> lo; lo w (1) -> low; e r (2) -> er; Ġ low (3) -> Ġlow
  const Tokenizer t = tiny(R"(["l o", "lo w", "e r", "Ġ low"])");
  CHECK(t.encode("lower low") == std::vector<int64_t>{7, 8, 9});
  CHECK(t.decode({7, 8, 9}) == "lower low");
  CHECK(t.vocab_size() == 12);
  // "o w" ranked before "l o": o w merges first, and "l" + "ow" has no merge.
  const Tokenizer u = tiny(R"([["o", "w"], ["l", "o"], ["lo", "w"]])");
  CHECK(u.encode("low") == std::vector<int64_t>{0, 11});
  // An added token is matched in the text before anything else.
  CHECK(t.encode("low<|endoftext|>low") == std::vector<int64_t>{7, 10, 7});
  CHECK(t.decode({7, 10}) == "low<|endoftext|>");
}

TEST_CASE("tokenizer: padded vocabulary sizes", "[tokenizer]") {
  CHECK(padded_vocab(1000, 1) == 1024);
  CHECK(padded_vocab(49152, 8) == 49152);
  CHECK(padded_vocab(50257, 1) == 50304);  // GPT-2's, as nanoGPT pads it
  CHECK(padded_vocab(100, 3) == 192);      // a multiple of 64 and of tp 3
}
