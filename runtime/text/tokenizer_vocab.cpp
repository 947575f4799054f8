// runtime/text/tokenizer_vocab.cpp — apply_tokenizer (tokenizer.h): the model's
// vocabulary size follows --tokenizer, or the manifest scripts/prepare_data.py wrote
// beside the --data shards.
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/output/output_file.h"

namespace picotron {

using json = nlohmann::json;

namespace {
// scripts/prepare_data.py's manifest.json in the --data folder or the folder above it.
std::string find_manifest(const std::string& data) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (data.empty() || !fs::exists(data, ec)) return "";
  const fs::path here = fs::is_directory(data, ec) ? fs::path(data) : fs::path(data).parent_path();
  for (const fs::path& dir : {here, here.parent_path()})
    if (fs::is_regular_file(dir / "manifest.json", ec)) return (dir / "manifest.json").string();
  return "";
}
}  // namespace

// The vocabulary follows the data: --tokenizer, or the manifest beside --data. Without
// --vocab-size or --init-from, V is the tokenizer's rounded up (padded_vocab); with them,
// a tokenizer larger than V is one line.
std::vector<std::string> apply_tokenizer(const VocabFlags& flags, LlamaConfig& llama) {
  std::string source = flags.tokenizer;
  int64_t entries = 0;
  try {
    if (!flags.tokenizer.empty()) {
      entries = Tokenizer::load(flags.tokenizer).vocab_size();
    } else if (source = find_manifest(flags.data); !source.empty()) {
      std::ifstream in = open_input_file("manifest " + source, source);
      const json manifest = parse_json(in, source);
      if (!manifest.contains("vocab_size") || !manifest["vocab_size"].is_number_integer() || manifest["vocab_size"] <= 0)
        return {source + ": no positive integer vocab_size (a manifest of scripts/prepare_data.py has one)"};
      entries = manifest["vocab_size"].get<int64_t>();
    } else {
      return {};
    }
  } catch (const std::exception& e) {
    return {std::string(e.what()).substr(0, std::string(e.what()).find('\n'))};
  }
  const bool fixed = !flags.init_from.empty() || flags.vocab_size_given;
  if (!fixed) llama.vocab_size = padded_vocab(entries, flags.tp);
  else if (entries > llama.vocab_size)
    return {source + ": the tokenizer has " + std::to_string(entries) + " entries but the model's vocab_size is " +
            std::to_string(llama.vocab_size) + (flags.init_from.empty() ? " (--vocab-size)" : " (" + flags.init_from + ")")};
  return {};
}

}  // namespace picotron
