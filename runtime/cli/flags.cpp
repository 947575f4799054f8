// runtime/cli/flags.cpp — parse_args, --help, config_fields and flag_problems over the
// flag table (flag_table.cpp), and the makers of its rows (flag_row.h). See flags.h.
#include "runtime/cli/flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include <cxxopts.hpp>

#include "runtime/cli/flag_row.h"
#include "runtime/cli/train_config.h"

namespace picotron {

std::string value_text(bool v) { return v ? "true" : "false"; }
std::string value_text(double v) {
  for (int digits = 6;; ++digits) {
    std::ostringstream o;
    o.precision(digits);
    o << v;
    if (!std::isfinite(v) || digits >= 17 || std::strtod(o.str().c_str(), nullptr) == v) return o.str();
  }
}

namespace flag_row {

int64_t to_integer(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try { v = std::stoll(text, &used); } catch (const std::exception&) { used = 0; }
  if (used == 0 || used != text.size())
    throw std::invalid_argument("--" + flag + ": '" + text + "' is not a valid value");
  return v;
}
double to_real(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try { v = std::stod(text, &used); } catch (const std::exception&) { used = 0; }
  if (used == 0 || used != text.size() || !std::isfinite(v))
    throw std::invalid_argument("--" + flag + ": '" + text + "' is not a finite number");
  return v;
}
bool to_bool(const std::string& flag, const std::string& text) {
  if (text == "true" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "no") return false;
  throw std::invalid_argument("--" + flag + ": '" + text + "' is not a valid value (true or false)");
}
// "a, b or c"
std::string one_of(const std::vector<std::string>& choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) out += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return out;
}

// ---- the rows' makers (flag_row.h) ----------------------------------------------------
Flag real(std::string name, std::string group, std::string help, Field<double> field, Bounds b) {
  Flag f{name, group, help};
  f.set = [name, field](RunConfig& c, const std::string& text) { field(c) = to_real(name, text); };
  f.show = [field](const RunConfig& c) { return value_text(value_of(field, c)); };
  f.check = bounded<double>(name, field, b);
  return f;
}
Flag text(std::string name, std::string group, std::string help, Field<std::string> field) {
  Flag f{name, group, help};
  f.set = [field](RunConfig& c, const std::string& t) { field(c) = t; };
  f.show = [field](const RunConfig& c) { return value_of(field, c); };
  return f;
}
Flag choice(std::string name, std::string group, std::string help, Field<std::string> field,
            std::vector<std::string> choices) {
  Flag f = text(name, group, help, field);
  f.set = [name, field, choices](RunConfig& c, const std::string& t) {
    if (std::find(choices.begin(), choices.end(), t) == choices.end())
      throw std::invalid_argument("--" + name + " must be " + one_of(choices) + ", got '" + t + "'");
    field(c) = t;
  };
  return f;
}
Flag on_off(std::string name, std::string group, std::string help, Field<bool> field) {
  Flag f{name, group, help, /*is_switch=*/true};
  f.set = [name, field](RunConfig& c, const std::string& t) { field(c) = to_bool(name, t); };
  f.show = [field](const RunConfig& c) { return value_text(value_of(field, c)); };
  return f;
}
Flag preset_override(Flag f) {  // a model-shape flag: its default is the preset's
  f.shows_default = false;
  return f;
}

}  // namespace flag_row

namespace {

using namespace flag_row;

const Flag* find_flag(const std::string& name) {
  for (const Flag& f : flag_table())
    if (f.name == name) return &f;
  return nullptr;
}

std::string help_text() {
  const RunConfig d;  // the defaults
  cxxopts::Options opts("train", "picotron: train a LLaMA-like model with 4D parallelism");
  const std::vector<std::string> groups = {"Model", "Hardware", "Training", "Parallelism", "Learning", "Output", "Hangs",
                                            "Planner"};
  for (const Flag& f : flag_table()) {
    auto value = f.is_switch ? cxxopts::value<bool>() : cxxopts::value<std::string>();
    if (f.shows_default && !f.is_switch && !f.show(d).empty()) value->default_value(f.show(d));
    opts.add_options(f.group)(f.name, f.help, value);
  }
  opts.add_options("Output")("h,help", "print this help");
  // A layout needs one process per rank: dp x pp x cp x tp of them, from mpirun (or torchrun).
  return opts.help(groups) + R"(
Examples:
  one process (the CPU or one GPU):
    build/train --steps 200
  data x tensor parallelism, 2 x 2 = 4 processes (--oversubscribe: more ranks than cores):
    mpirun --oversubscribe -np 4 build/train --device cpu --dp 2 --tp 2 --steps 50
  a pipeline of 2 stages, 4 micro-batches per step, 1F1B, narrated:
    mpirun --oversubscribe -np 2 build/train --device cpu --pp 2 --grad-acc-steps 4 --steps 3 --explain

Where to learn:
  --explain               narrates the first step: every collective, its group, shapes and line of code
  scripts/debug.sh        stops a technique in gdb at its communication (scripts/debug.sh --help)
  docs/stepping.md        recorded debugger sessions, technique by technique
  README.md               the reading order, and each technique's folder README)";
}

// The command line as (flag, text) pairs, checked: two dashes, a known flag, a value
// where one is needed and never an empty one. Every problem here is one line naming it.
std::vector<std::pair<const Flag*, std::string>> split_command_line(int argc, const char* const* argv) {
  std::vector<std::pair<const Flag*, std::string>> given;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (arg.size() > 1 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1])))
        throw std::invalid_argument(arg + ": long flags take two dashes (--" + arg.substr(1) + ")");
      throw std::invalid_argument("unexpected argument '" + arg + "'");
    }
    const auto eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const Flag* flag = find_flag(name);
    if (!flag) throw std::invalid_argument("--" + name + ": no such flag");
    std::string value;
    if (eq != std::string::npos) value = arg.substr(eq + 1);
    else if (flag->is_switch) value = "true";
    else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) value = argv[++i];
    else throw std::invalid_argument("--" + name + " needs a value");
    if (value.empty()) throw std::invalid_argument("--" + name + ": empty value");
    given.emplace_back(flag, value);
  }
  return given;
}

}  // namespace

ParsedArgs parse_args(int argc, const char* const* argv) {
  ParsedArgs out;
  for (int i = 1; i < argc; ++i)  // --help wins over any other flag, even a malformed one
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      out.message = help_text();
      return out;
    }
  try {
    const auto given = split_command_line(argc, argv);
    RunConfig c;
    c.llama = preset(c.model);
    // The preset first (the shape flags override it), then every flag in command-line order.
    for (const auto& [flag, value] : given)
      if (flag->name == "model") flag->set(c, value);
    bool warmup_given = false;
    for (const auto& [flag, value] : given) {
      if (flag->name == "model") continue;
      if (flag->name == "prompt-ids") c.prompt_ids.clear();  // given twice: the last one
      flag->set(c, value);
      warmup_given = warmup_given || flag->name == "warmup-steps";
    }
    for (const auto& [flag, value] : given)
      if (flag->group == "Model" && flag->name != "init-from" && flag->name != "dry-run" &&
          std::find(c.shape_flags.begin(), c.shape_flags.end(), flag->name) == c.shape_flags.end())
        c.shape_flags.push_back(flag->name);
    if (!warmup_given) c.warmup_steps = c.steps / 20;
    out.config = c;
  } catch (const std::exception& e) {
    out.message = std::string("error: ") + e.what() + " (see --help)";
    out.exit_code = 2;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> config_fields(const RunConfig& c) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Flag& f : flag_table()) out.emplace_back("--" + f.name, f.show(c));
  return out;
}

std::vector<std::string> flag_problems(const RunConfig& c) {
  Problems problems;
  for (const Flag& f : flag_table())  // each flag's own value
    if (f.check) f.check(c, problems);
  return problems;
}

}  // namespace picotron
