// runtime/text/tokenizer.cpp — see tokenizer.h for the pipeline and what is supported.
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runtime/output/output_file.h"

#ifdef PICOTRON_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace picotron {

namespace {

using json = nlohmann::json;

// GPT-2's split: contractions, letters, numbers, other symbols, each with one leading
// space; runs of spaces (the last one joins the next word).
const char* kByteLevelRegex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

size_t next_char(const std::string& s, size_t i) {  // past the UTF-8 code point at i
  for (++i; i < s.size() && (uint8_t(s[i]) & 0xC0) == 0x80;) ++i;
  return i;
}

std::string utf8(uint32_t cp) {
  std::string o;
  if (cp < 0x80) o += char(cp);
  else if (cp < 0x800) o += char(0xC0 | cp >> 6), o += char(0x80 | (cp & 0x3F));
  else o += char(0xE0 | cp >> 12), o += char(0x80 | ((cp >> 6) & 0x3F)), o += char(0x80 | (cp & 0x3F));
  return o;
}

std::shared_ptr<void> compile(const std::string& pattern, const std::string& file) {
#ifdef PICOTRON_WITH_PCRE2
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw std::runtime_error(file + ": the pre-tokenizer's regex does not compile (at " + std::to_string(offset) +
                             "): " + reinterpret_cast<char*>(message));
  }
  return std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
#else
  throw std::runtime_error(file + ": this build has no PCRE2 (install libpcre2-dev, rebuild): its regex pre-tokenizer is unsupported");
#endif
}

// `text` cut at the matches of `regex`: the matches and the text between them, in order
// (Hugging Face's "Isolated" behaviour).
std::vector<std::string> split_isolated(const std::string& text, void* regex) {
  std::vector<std::string> out;
#ifdef PICOTRON_WITH_PCRE2
  auto* code = static_cast<pcre2_code*>(regex);
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
  size_t pos = 0, last = 0;
  while (pos <= text.size() &&
         pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, 0, match, nullptr) > 0) {
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
    if (span[1] == span[0]) {  // an empty match: go on one character later
      pos = next_char(text, span[0]);
      continue;
    }
    if (span[0] > last) out.push_back(text.substr(last, span[0] - last));
    out.push_back(text.substr(span[0], span[1] - span[0]));
    last = pos = span[1];
  }
  pcre2_match_data_free(match);
  if (last < text.size()) out.push_back(text.substr(last));
#else
  (void)regex;
  out.push_back(text);
#endif
  return out;
}

// One pre-tokenizer of tokenizer.json (a Sequence: each of its steps, in order).
void read_pre_tokenizer(const json& j, std::vector<Tokenizer::PreTokenizer>& steps, const std::string& file) {
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& p : j.at("pretokenizers")) read_pre_tokenizer(p, steps, file);
  } else if (type == "ByteLevel") {  // [a space before each piece] [GPT-2's split], then bytes -> characters
    const bool prefix = j.value("add_prefix_space", false), regex = j.value("use_regex", true);
    if (prefix || regex)
      steps.push_back({Tokenizer::PreTokenizer::kRegexIsolated, regex ? compile(kByteLevelRegex, file) : nullptr, prefix});
    steps.push_back({Tokenizer::PreTokenizer::kByteLevel, nullptr});
  } else if (type == "Split") {
    if (j.value("behavior", "") != "Isolated" || j.value("invert", false))
      throw std::runtime_error(file + ": unsupported Split pre-tokenizer (behavior " + j.value("behavior", "?") +
                               "; only Isolated, not inverted)");
    const auto& p = j.at("pattern");
    const std::string regex = p.contains("Regex") ? p.at("Regex").get<std::string>()
                                                  : "\\Q" + p.at("String").get<std::string>() + "\\E";
    steps.push_back({Tokenizer::PreTokenizer::kRegexIsolated, compile(regex, file)});
  } else if (type == "Digits") {
    steps.push_back({Tokenizer::PreTokenizer::kRegexIsolated, compile(j.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+", file)});
  } else {
    throw std::runtime_error(file + ": unsupported pre-tokenizer '" + type + "' (supported: ByteLevel, Split, Digits, Sequence)");
  }
}

}  // namespace

const std::vector<std::string>& byte_to_char() {
  static const std::vector<std::string> table = [] {
    // Printable bytes stand for themselves; the others (controls, space, ...) take the
    // code points from 256 on, in byte order. So every byte is a visible character.
    std::vector<std::string> t(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = utf8(printable ? b : next++);
    }
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, uint8_t>& char_to_byte() {
  static const std::unordered_map<std::string, uint8_t> table = [] {
    std::unordered_map<std::string, uint8_t> t;
    for (int b = 0; b < 256; ++b) t[byte_to_char()[b]] = uint8_t(b);
    return t;
  }();
  return table;
}

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string file = std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "tokenizer.json").string() : path;
  if (!std::filesystem::exists(file)) throw std::runtime_error("--tokenizer " + path + ": no tokenizer.json there");
  json j;
  try {
    std::ifstream in = open_input_file("--tokenizer " + file, file);
    j = parse_json(in, file);
  } catch (const json::exception& e) {
    throw std::runtime_error(file + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  Tokenizer t;
  try {
    const auto& model = j.at("model");
    if (model.value("type", "") != "BPE")
      throw std::runtime_error(file + ": unsupported tokenizer model '" + model.value("type", "?") + "' (only byte-level BPE)");
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      throw std::runtime_error(file + ": unsupported normalizer '" + j["normalizer"].value("type", "?") + "'");
    if (j.at("pre_tokenizer").is_null()) throw std::runtime_error(file + ": no pre-tokenizer: not a byte-level BPE");
    read_pre_tokenizer(j["pre_tokenizer"], t.pre_, file);
    if (t.pre_.empty() || t.pre_.back().kind != PreTokenizer::kByteLevel)
      throw std::runtime_error(file + ": unsupported: the pre-tokenizer does not end with ByteLevel (not a byte-level BPE)");
    t.ignore_merges_ = model.value("ignore_merges", false);
    for (const auto& [symbol, id] : model.at("vocab").items()) t.vocab_[symbol] = id.get<int64_t>();
    int rank = 0;
    for (const auto& m : model.at("merges")) {  // "a b" (older files) or ["a", "b"]
      std::pair<std::string, std::string> pair;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos) throw std::runtime_error(file + ": a merge without a space: '" + s + "'");
        pair = {s.substr(0, space), s.substr(space + 1)};
      } else {
        pair = {m.at(0).get<std::string>(), m.at(1).get<std::string>()};
      }
      t.merge_rank_.emplace(pair, rank++);
    }
    if (j.contains("added_tokens"))
      for (const auto& a : j["added_tokens"]) t.added_.push_back({a.at("content").get<std::string>(), a.at("id").get<int64_t>()});
  } catch (const json::exception& e) {
    throw std::runtime_error(file + ": not a tokenizer.json as expected (" + std::string(e.what()) + ")");
  }
  std::sort(t.added_.begin(), t.added_.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [symbol, id] : t.vocab_) t.vocab_size_ = std::max(t.vocab_size_, id + 1);
  for (const auto& [content, id] : t.added_) t.vocab_size_ = std::max(t.vocab_size_, id + 1);
  t.symbol_of_.assign(size_t(t.vocab_size_), "");
  for (const auto& [symbol, id] : t.vocab_) t.symbol_of_[size_t(id)] = symbol;
  for (const auto& [content, id] : t.added_) t.symbol_of_[size_t(id)] = content;
  t.description_ = file + ": byte-level BPE, vocabulary " + std::to_string(t.vocab_size_) + ", " +
                   std::to_string(t.merge_rank_.size()) + " merges";
  return t;
}

std::vector<std::string> Tokenizer::split(const std::string& text) const {
  std::vector<std::string> pieces{text};
  for (const auto& step : pre_) {
    std::vector<std::string> next;
    for (std::string& piece : pieces) {
      if (step.kind == PreTokenizer::kByteLevel) {  // bytes -> printable characters (the last step)
        std::string mapped;
        for (unsigned char b : piece) mapped += byte_to_char()[b];
        next.push_back(std::move(mapped));
        continue;
      }
      if (step.prefix_space && piece.rfind(' ', 0) != 0) piece = " " + piece;
      if (!step.regex) next.push_back(std::move(piece));
      else for (auto& p : split_isolated(piece, step.regex.get())) next.push_back(std::move(p));
    }
    pieces = std::move(next);
  }
  return pieces;
}

void Tokenizer::bpe(const std::string& word, std::vector<int64_t>& out) const {
  if (ignore_merges_)  // Llama-3: a word that is in the vocabulary is one token
    if (auto it = vocab_.find(word); it != vocab_.end()) return out.push_back(it->second);
  std::vector<std::string> symbols;  // one per character of the byte-mapped word
  for (size_t i = 0; i < word.size(); i = next_char(word, i)) symbols.push_back(word.substr(i, next_char(word, i) - i));
  // BEGIN ASSIGNMENT data.bpe_merge
  // Merge the adjacent pair of lowest rank (the leftmost of equals), until none merges.
  while (symbols.size() > 1) {
    int best = INT_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i)
      if (auto it = merge_rank_.find({symbols[i], symbols[i + 1]}); it != merge_rank_.end() && it->second < best)
        best = it->second, at = i;
    if (best == INT_MAX) break;
    symbols[at] += symbols[at + 1];
    symbols.erase(symbols.begin() + long(at) + 1);
  }
  // END ASSIGNMENT
  for (const auto& s : symbols) {
    const auto it = vocab_.find(s);
    if (it == vocab_.end()) throw std::runtime_error("tokenizer: symbol '" + s + "' is not in the vocabulary");
    out.push_back(it->second);
  }
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  size_t start = 0;
  auto plain = [&](size_t end) {  // text[start, end) holds no added token
    if (end > start)
      for (const auto& word : split(text.substr(start, end - start))) bpe(word, ids);
  };
  for (size_t i = 0; i < text.size();) {  // added tokens ("<|endoftext|>") match first, longest first
    const auto hit = std::find_if(added_.begin(), added_.end(),
                                  [&](const auto& a) { return !a.first.empty() && text.compare(i, a.first.size(), a.first) == 0; });
    if (hit == added_.end()) {
      ++i;
      continue;
    }
    plain(i);
    ids.push_back(hit->second);
    start = i = i + hit->first.size();
  }
  plain(text.size());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string bytes;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size_) throw std::runtime_error("tokenizer: id " + std::to_string(id) + " is outside the vocabulary");
    const std::string& symbol = symbol_of_[size_t(id)];
    if (std::any_of(added_.begin(), added_.end(), [&](const auto& a) { return a.second == id; })) {
      bytes += symbol;  // an added token reads as itself
      continue;
    }
    for (size_t i = 0; i < symbol.size(); i = next_char(symbol, i)) {
      const auto it = char_to_byte().find(symbol.substr(i, next_char(symbol, i) - i));
      bytes += it != char_to_byte().end() ? std::string(1, char(it->second)) : symbol.substr(i, next_char(symbol, i) - i);
    }
  }
  return bytes;
}

}  // namespace picotron
