// runtime/text/tokenizer.h — text <-> token ids for byte-level BPE tokenizers, read from a
// Hugging Face tokenizer.json: GPT-2's, Llama-3's, SmolLM's, and the one that
// scripts/prepare_data.py trains. Why here: no C++ tokenizer library is reachable from
// this project's machines, and this family is small enough to read whole:
//
//   text --added tokens--> pieces --pre-tokenizer--> words --bytes as printable chars-->
//        --BPE merges, lowest rank first--> symbols --vocab--> ids
//
//   pre-tokenizers: ByteLevel (GPT-2's split regex, or none: use_regex false), Split
//   (a regex, behaviour Isolated), Digits, and a Sequence of them. Regexes go through PCRE2
//   (Unicode properties, lookahead), JSON through nlohmann-json. Decoding maps each id's
//   symbol back to its bytes. A tokenizer outside this family (WordPiece, Unigram, a
//   normalizer, a pre-tokenizer not above) is one line: "unsupported ...".
//
// Test: ctest -R tokenizer (ids equal to the tokenizers library's on real text)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "picotron/config.h"

namespace picotron {

class Tokenizer {
 public:
  // `path`: a folder holding tokenizer.json, or the file. Throws std::runtime_error
  // naming the file and what is wrong or unsupported.
  static Tokenizer load(const std::string& path);

  std::vector<int64_t> encode(const std::string& text) const;  // no BOS/EOS added
  std::string decode(const std::vector<int64_t>& ids) const;   // unknown ids: throws
  int64_t vocab_size() const { return vocab_size_; }           // highest id + 1
  const std::string& describe() const { return description_; }

  struct PreTokenizer {  // one step of the pre-tokenizer
    enum Kind { kRegexIsolated, kByteLevel } kind;
    std::shared_ptr<void> regex;  // the compiled pcre2_code (null: no split)
    bool prefix_space = false;    // ByteLevel's add_prefix_space: " " before a piece that lacks one
  };

 private:
  std::vector<std::string> split(const std::string& text) const;        // pre-tokenize
  void bpe(const std::string& word, std::vector<int64_t>& out) const;     // one word's ids

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> symbol_of_;                                    // id -> symbol
  std::map<std::pair<std::string, std::string>, int> merge_rank_;
  std::vector<std::pair<std::string, int64_t>> added_;                    // content, id (longest first)
  std::vector<PreTokenizer> pre_;
  bool ignore_merges_ = false;
  int64_t vocab_size_ = 0;
  std::string description_;
};

// The vocabulary size a model gets for a tokenizer of `entries` ids (--vocab-size's default
// with --tokenizer or a data manifest): rounded up to a multiple of 64 and of tp (which
// splits the vocabulary rows). The padding rows are never a target; they only learn to be
// unlikely. 49,152 (SmolLM) stays; 1,000 becomes 1,024.
inline int64_t padded_vocab(int64_t entries, int tp) {
  int64_t multiple = 64;
  while (multiple % tp != 0) multiple += 64;  // the least common multiple of 64 and tp
  return (entries + multiple - 1) / multiple * multiple;
}

// What the vocabulary's size is resolved from (the start-up's resolve_config fills it).
struct VocabFlags {
  std::string tokenizer;  // --tokenizer DIR
  std::string data;  // --data: a manifest.json (scripts/prepare_data.py) in or just above its folder
  std::string init_from;  // --init-from: its config.json fixed the vocabulary
  bool vocab_size_given = false;  // --vocab-size fixed it
  int tp = 1;  // --tp: the padding is a multiple of it
};
// --tokenizer DIR, or the manifest beside --data: the vocabulary follows the data. Unless
// --vocab-size or --init-from fixed it, `llama.vocab_size` becomes padded_vocab(the
// tokenizer's entries, tp); when fixed, a tokenizer larger than it is a problem. One line each.
std::vector<std::string> apply_tokenizer(const VocabFlags& flags, LlamaConfig& llama);

// GPT-2's map from a byte to a printable character (as UTF-8), and back.
const std::vector<std::string>& byte_to_char();
const std::unordered_map<std::string, uint8_t>& char_to_byte();

}  // namespace picotron
