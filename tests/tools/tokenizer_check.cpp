// tokenizer_check TOKENIZER CASES.json — picotron's tokenizer (runtime/text/tokenizer.h) against
// the Hugging Face tokenizers library: CASES.json is [{"text": ..., "ids": [...]}, ...],
// the library's ids (tests/scripts/tokenizer_cases.py writes it). Every text must encode to the
// same ids and decode back to the same text. Prints "TOKENIZER OK" or each difference.
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/text/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: tokenizer_check TOKENIZER CASES.json\n";
    return 2;
  }
  try {
    const auto tok = picotron::Tokenizer::load(argv[1]);
    std::ifstream in(argv[2]);
    const auto cases = nlohmann::json::parse(in);
    int failures = 0;
    size_t tokens = 0;
    for (const auto& c : cases) {
      const std::string text = c.at("text");
      const std::vector<int64_t> expected = c.at("ids").get<std::vector<int64_t>>();
      const auto ids = tok.encode(text);
      tokens += ids.size();
      if (ids != expected) {
        ++failures;
        size_t k = 0;
        while (k < ids.size() && k < expected.size() && ids[k] == expected[k]) ++k;
        std::cout << "ids differ at token " << k << " of " << expected.size() << " for text: "
                  << nlohmann::json(text.substr(0, 120)).dump() << "\n";
      } else if (tok.decode(ids) != text) {
        ++failures;
        std::cout << "decode differs for text: " << nlohmann::json(text.substr(0, 120)).dump() << "\n";
      }
    }
    std::cout << tok.describe() << ": " << cases.size() << " texts, " << tokens << " tokens\n"
              << (failures ? "TOKENIZER FAILED" : "TOKENIZER OK") << std::endl;
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\nTOKENIZER FAILED" << std::endl;
    return 1;
  }
}
