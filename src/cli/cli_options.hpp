#pragma once
// One command-line parser for every subcommand: Boost.Program_options behind a small class that
// declares options bound to variables, parses, prints --help, and turns every parse error into a
// UsageError (exit 2) that names the command, the option and, for an unknown option, the closest
// valid one.
//
//   std::string dir = "data/fashion-mnist";
//   int64_t batch = 256;
//   CommandLine cl("hpctrain bench io", "usage: hpctrain bench io [--data DIR] [--batch B]");
//   cl.option("data", &dir, "DIR", "prepared dataset");   // help shows "(default data/fashion-mnist)"
//   cl.option("batch", &batch, "B", "global batch");
//   if (!cl.parse(args)) return kExitOk;                  // --help or -h: help printed, nothing to run
//
// Messages (each prefixed with the command, e.g. "hpctrain bench io: "):
//   unknown option '--bacth' (did you mean '--batch'?); see 'hpctrain bench io --help'
//   --batch needs a value                        (also for "--batch --epochs 2")
//   --batch 'x' is not an integer                (or "is not a number" for a double option)
//   one PATH only ('b')                          (positional(), more than max_count given)
//   unexpected argument 'b'                      (a positional argument where none is declared)
// Long options only, spelt in full (no prefix guessing), besides -h; "--name value" and
// "--name=value"; a repeated option takes its last value; "-1" after an option is its value.
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/program_options.hpp>

#include "base/error.hpp"
#include "base/suggest.hpp"  // edit_distance, closest_match
#include "src/cli/commands.hpp"

namespace ht {

/// Whether `args` hold --help or -h: for the commands whose help is not CommandLine's (train's key
/// table, doctor's own parser).
bool help_requested(const Args& args);

class CommandLine {
 public:
  /// `command` starts every message ("hpctrain bench io"); --help prints `usage` (one or more
  /// lines: the synopsis and any notes; a trailing newline is optional), then the options, one a line.
  CommandLine(std::string command, std::string usage);

  /// --name VALUE_NAME, stored in *var (std::string, int, int64_t or double). The value *var holds
  /// now is the default; --help shows it after `help` as "(default X)" unless it is an empty string
  /// or show_default is false.
  template <class T>
  CommandLine& option(const char* name, T* var, const char* value_name, const char* help, bool show_default = true);

  /// A flag --name without a value: *var becomes true when given.
  CommandLine& flag(const char* name, bool* var, const char* help);

  /// Arguments that are not options go to *values, in order. More than max_count of them is a
  /// UsageError "one NAME only ('extra')" (or "at most N NAME arguments"). Without this call a
  /// positional argument is a UsageError "unexpected argument 'x'".
  CommandLine& positional(const char* name, std::vector<std::string>* values, int max_count);

  /// Unknown options and positional arguments are not errors: they go, as their original tokens
  /// and in order, to *rest for a second parser (bench train hands them to parse_config). Takes
  /// the place of positional(): the value after an unknown option looks positional.
  CommandLine& pass_through(std::vector<std::string>* rest);

  /// Parses args (the arguments after the subcommand's name) into the bound variables. Returns false
  /// when --help or -h was given: the help is then printed to `help_out` on rank 0 and the caller
  /// returns kExitOk. Throws UsageError as described above.
  bool parse(const Args& args, std::ostream* help_out = nullptr);

  /// Whether --name appeared on the command line (valid after parse).
  bool given(const std::string& name) const { return vm_.count(name) && !vm_[name].defaulted(); }

  /// The text --help prints.
  std::string help() const;

  /// Throws UsageError(command + ": " + message).
  [[noreturn]] void fail(const std::string& message) const;

  const std::string& command() const { return command_; }

 private:
  struct Entry {
    std::string name, value_name, help, default_text, type_word;
  };
  void add_entry(Entry e) { entries_.push_back(std::move(e)); }
  [[noreturn]] void fail_unknown(const std::string& option) const;
  bool is_option(const std::string& name) const;  // a declared long name (before any '=')

  template <class T> static std::string describe(const T& v);
  template <class T> static const char* type_word();

  std::string command_, usage_;
  boost::program_options::options_description desc_;
  boost::program_options::variables_map vm_;
  std::vector<Entry> entries_;
  std::vector<std::string>* positional_ = nullptr;
  std::string positional_name_;
  int positional_max_ = 0;
  std::vector<std::string>* rest_ = nullptr;
};

// ---- template members -------------------------------------------------------------------------

template <class T> std::string CommandLine::describe(const T& v) {
  std::ostringstream os;
  os << v;  // default precision: 25 for 25.0, 0.1 for 0.1
  return os.str();
}

template <class T> const char* CommandLine::type_word() {
  if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else return "a valid value";
}

template <class T>
CommandLine& CommandLine::option(const char* name, T* var, const char* value_name, const char* help,
                                 bool show_default) {
  namespace po = boost::program_options;
  const std::string def = describe(*var);
  desc_.add_options()(name, po::value<T>(var)->default_value(*var, def)->value_name(value_name), help);
  add_entry({name, value_name, help, show_default ? def : "", type_word<T>()});
  return *this;
}

}  // namespace ht
