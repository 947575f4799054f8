// runtime/cli/flag_row.h — how one row of build/train's flag table is made (internal to
// this room): a Flag is a name, its --help group and text, and three functions: set (the
// text into the RunConfig field, throwing one line naming the flag), show (the field as
// text: --help's default, config_fields) and check (the value alone). The table itself is
// flag_table.cpp; parsing the command line with it is flags.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/cli/flags.h"

namespace picotron::flag_row {

using Problems = std::vector<std::string>;

// ---- the value of one flag, read whole: one line naming the flag when it is not one ----
int64_t to_integer(const std::string& flag, const std::string& text);
double to_real(const std::string& flag, const std::string& text);  // finite
bool to_bool(const std::string& flag, const std::string& text);     // true/1/yes, false/0/no
std::string one_of(const std::vector<std::string>& choices);        // "a, b or c"

// ---- one row per flag ----------------------------------------------------------------
struct Flag {
  Flag(std::string name_, std::string group_, std::string help_, bool is_switch_ = false)
      : name(std::move(name_)), group(std::move(group_)), help(std::move(help_)), is_switch(is_switch_) {}
  std::string name;   // without the dashes: "steps"
  std::string group;  // its --help section
  std::string help;
  bool is_switch = false;     // --sp (or --sp=false); every other flag takes a value
  bool shows_default = true;  // --help prints the default (not for preset overrides)
  std::function<void(RunConfig&, const std::string& text)> set;  // throws one line naming the flag
  std::function<std::string(const RunConfig&)> show;             // the value as text
  std::function<void(const RunConfig&, Problems&)> check;        // the value alone (check_flag_rules: the rules between flags)
};

// Where a row's value lives in the config.
template <typename T>
using Field = std::function<T&(RunConfig&)>;
template <typename T>
Field<T> of(T TrainConfig::*member) { return [member](RunConfig& c) -> T& { return c.*member; }; }
template <typename T>
Field<T> of(T LlamaConfig::*member) { return [member](RunConfig& c) -> T& { return c.llama.*member; }; }
template <typename T>
Field<T> of(T LayoutSearchSettings::*member) { return [member](RunConfig& c) -> T& { return c.planner.*member; }; }
template <typename T>
T value_of(const Field<T>& field, const RunConfig& c) {
  // A Field hands out a mutable reference (the same accessor sets the value); reading
  // through it changes nothing, so no copy of the config is needed.
  return field(const_cast<RunConfig&>(c));
}

// The checks a row may carry: "--steps must be >= 0 (note), got -1", "... must be <= hi".
struct Bounds {
  const char* op;  // ">" or ">="
  double low;
  double high;     // the largest value every product of sizes still fits 64 bits with
  std::string note = "";
};
template <typename T>
std::function<void(const RunConfig&, Problems&)> bounded(const std::string& flag, Field<T> field, Bounds b) {
  return [flag, field, b](const RunConfig& c, Problems& p) {
    const T v = value_of(field, c);
    if (!std::isfinite(double(v))) return p.push_back("--" + flag + " must be a finite number, got " + value_text(v));
    const bool low_ok = std::string(b.op) == ">" ? double(v) > b.low : double(v) >= b.low;
    if (!low_ok) p.push_back("--" + flag + " must be " + b.op + " " + value_text(int64_t(b.low)) + b.note + ", got " + value_text(v));
    if (double(v) > b.high) p.push_back("--" + flag + " must be <= " + value_text(int64_t(b.high)) + ", got " + value_text(v));
  };
}
inline constexpr double kNoLimit = 1e300;  // a bound that never binds

// The rows' makers: an integer field (bounds checked), a real, a text, one of some
// choices, a switch; preset_override marks a model-shape flag (its default is the preset's).
template <typename T>
Flag integer(std::string name, std::string group, std::string help, Field<T> field, Bounds b) {
  Flag f{name, group, help};
  f.set = [name, field](RunConfig& c, const std::string& text) {
    if constexpr (std::is_unsigned_v<T>) {  // --seed: 0 .. 2^64 - 1
      size_t used = 0;
      unsigned long long v = 0;
      try { v = std::stoull(text, &used); } catch (const std::exception&) { used = 0; }
      if (used == 0 || used != text.size() || text[0] == '-')
        throw std::invalid_argument("--" + name + ": '" + text + "' is not a valid value");
      field(c) = T(v);
    } else {
      const int64_t v = to_integer(name, text);
      if (v < int64_t(std::numeric_limits<T>::min()) || v > int64_t(std::numeric_limits<T>::max()))
        throw std::invalid_argument("--" + name + ": '" + text + "' is not a valid value");  // does not fit the field
      field(c) = T(v);
    }
  };
  f.show = [field](const RunConfig& c) { return value_text(value_of(field, c)); };
  f.check = bounded<T>(name, field, b);
  return f;
}
Flag real(std::string name, std::string group, std::string help, Field<double> field, Bounds b);
Flag text(std::string name, std::string group, std::string help, Field<std::string> field);
Flag choice(std::string name, std::string group, std::string help, Field<std::string> field,
            std::vector<std::string> choices);
Flag on_off(std::string name, std::string group, std::string help, Field<bool> field);
Flag preset_override(Flag f);

// Every flag, in --help's order within each group (flag_table.cpp).
const std::vector<Flag>& flag_table();

}  // namespace picotron::flag_row
