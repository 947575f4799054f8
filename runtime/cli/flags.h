// runtime/cli/flags.h — build/train's command line: every flag in one table
// (flag_table.cpp), each row its name, its --help group and text, the RunConfig field it sets
// (whose default, in runtime/cli/train_config.h or run_config.h, --help shows) and the checks on its value; then
// check_flag_rules(), the rules between flags (the mesh must divide the model, ...).
//
// Errors are ours, one line naming the flag: cxxopts (which splits the command line and
// formats --help) only ever sees a command line that flags.cpp has checked first.
//
// Test: build/tests/unit_tests "[config]"; ctest -L cli (cli.bad_*); tests/scripts/bad_inputs.sh
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cli/run_config.h"

namespace picotron {

// A value as the messages print it: 4, true, 0.003 (a double: the shortest text that
// reads back as exactly it, not 0.0030000000000000001).
std::string value_text(bool v);
std::string value_text(double v);
// Integers without a stream: check_flag_rules() spells its numbers into every message it
// might print, and the planner (layout_search.h) asks it about some 10^5 layouts.
inline std::string value_text(int v) { return std::to_string(v); }
inline std::string value_text(int64_t v) { return std::to_string(v); }
template <typename T>
std::string value_text(const T& v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// Outcome of parse_args: either a config to run, or text to print and an exit code.
struct ParsedArgs {
  std::optional<RunConfig> config;
  std::string message;  // help text or the error line
  int exit_code = 0;
};
ParsedArgs parse_args(int argc, const char* const* argv);

// Every setting as ("--flag", value text), in the table's order: the ranks of a job
// compare them at start (runtime/preflight/startup.h), so that a rank given other flags is
// named, not obeyed.
std::vector<std::pair<std::string, std::string>> config_fields(const RunConfig& c);

// The problems of each flag's value alone (the table's checks), one line each.
std::vector<std::string> flag_problems(const RunConfig& c);

// Every problem with the config, one line each (empty: valid): flag_problems, then the
// rules between flags (flag_rules.cpp). `world_size` is the number of processes the launcher
// started (the mesh must use exactly these).
std::vector<std::string> check_flag_rules(const RunConfig& c, int world_size);

}  // namespace picotron
