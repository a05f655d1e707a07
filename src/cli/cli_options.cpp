// CommandLine: Boost.Program_options for every subcommand (see cli_options.hpp for the messages).
#include "src/cli/cli_options.hpp"

#include <algorithm>
#include <ostream>
#include <set>

#include "base/log.hpp"
#include "mpi/dist.hpp"

namespace ht {

bool help_requested(const Args& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; });
}

namespace po = boost::program_options;

namespace {

// Long options only, in full: no abbreviations ("--bat" is not "--batch"), as the hand-written
// parsers before; "-h" is the one short option.
constexpr int kStyle = (po::command_line_style::default_style & ~po::command_line_style::allow_guessing);

std::string strip_dashes(std::string s) {
  while (!s.empty() && s[0] == '-') s.erase(0, 1);
  return s;
}

// How the user spelt an unregistered option: "--bogus" for "--bogus=3", "-x" for "-xyz".
std::string spelt(const po::option& o) {
  const std::string& tok = o.original_tokens.empty() ? o.string_key : o.original_tokens[0];
  if (tok.rfind("--", 0) == 0) return "--" + o.string_key;
  return o.string_key.rfind("-", 0) == 0 ? o.string_key : "-" + o.string_key;
}

}  // namespace

CommandLine::CommandLine(std::string command, std::string usage)
    : command_(std::move(command)), usage_(std::move(usage)) {
  if (!usage_.empty() && usage_.back() != '\n') usage_ += '\n';
  desc_.add_options()("help,h", "this help");
  entries_.push_back({"help", "", "this help", "", ""});
}

CommandLine& CommandLine::flag(const char* name, bool* var, const char* help) {
  desc_.add_options()(name, po::bool_switch(var), help);
  add_entry({name, "", help, "", ""});
  return *this;
}

CommandLine& CommandLine::positional(const char* name, std::vector<std::string>* values, int max_count) {
  positional_ = values;
  positional_name_ = name;
  positional_max_ = max_count;
  return *this;
}

CommandLine& CommandLine::pass_through(std::vector<std::string>* rest) {
  rest_ = rest;
  return *this;
}

bool CommandLine::is_option(const std::string& name) const {
  const std::string n = name.substr(0, name.find('='));
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == n; });
}

void CommandLine::fail(const std::string& message) const { throw UsageError(command_ + ": " + message); }

void CommandLine::fail_unknown(const std::string& option) const {
  std::vector<std::string> names;  // the command's own options; "help" only when it has none
  for (const auto& e : entries_)
    if (e.name != "help" || entries_.size() == 1) names.push_back(e.name);
  fail("unknown option '" + option + "' (did you mean '--" + closest_match(strip_dashes(option), names) +
       "'?); see '" + command_ + " --help'");
}

std::string CommandLine::help() const {
  std::vector<std::string> left;
  size_t width = 0;
  for (const auto& e : entries_) {
    std::string l = e.name == "help" ? "-h, --help" : "--" + e.name;
    if (!e.value_name.empty()) l += " " + e.value_name;
    width = std::max(width, l.size());
    left.push_back(std::move(l));
  }
  width = std::min<size_t>(width, 24);
  std::string out = usage_;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    std::string line = "  " + left[i];
    line += std::string(left[i].size() < width ? width - left[i].size() : 0, ' ') + "  " + e.help;
    if (!e.default_text.empty()) line += " (default " + e.default_text + ")";
    out += line + "\n";
  }
  return out;
}

bool CommandLine::parse(const Args& args, std::ostream* help_out) {
  po::parsed_options parsed(&desc_);
  try {
    parsed = po::command_line_parser(args).options(desc_).style(kStyle).allow_unregistered().run();
  } catch (const po::invalid_command_line_syntax& e) {
    if (e.kind() == po::invalid_command_line_syntax::missing_parameter) fail(e.get_option_name() + " needs a value");
    fail(e.what());
  } catch (const po::error& e) {
    fail(e.what());
  }
  for (const auto& o : parsed.options)
    if (!o.unregistered && o.string_key == "help") {
      if (dist().rank == 0) {
        if (help_out) *help_out << help() << std::flush;
        else log_raw_out(help());
      }
      return false;
    }

  // Unregistered options and positional arguments; registered options, the last of each name kept
  // (a repeated option overrides, as it always has).
  po::parsed_options known(&desc_);
  std::set<std::string> seen;
  std::vector<std::string> positional;
  for (auto it = parsed.options.rbegin(); it != parsed.options.rend(); ++it) {
    if (it->unregistered || it->string_key.empty()) continue;
    // Boost takes "--data --batch 2" as data = "--batch"; a value that names an option is a missing one.
    if (!it->value.empty() && it->value[0].rfind("--", 0) == 0 && is_option(strip_dashes(it->value[0])))
      fail("--" + it->string_key + " needs a value");
    if (seen.insert(it->string_key).second) known.options.insert(known.options.begin(), *it);
  }
  for (const auto& o : parsed.options) {
    if (rest_ && (o.unregistered || o.string_key.empty())) {
      rest_->insert(rest_->end(), o.original_tokens.begin(), o.original_tokens.end());
    } else if (o.unregistered) {
      fail_unknown(spelt(o));
    } else if (o.string_key.empty()) {
      const std::string& v = o.value.empty() ? std::string() : o.value[0];
      if (!positional_) fail("unexpected argument '" + v + "'");
      if (positional_max_ >= 0 && static_cast<int>(positional.size()) >= positional_max_)
        fail(positional_max_ == 1 ? "one " + positional_name_ + " only ('" + v + "')"
                                  : "at most " + std::to_string(positional_max_) + " " + positional_name_ +
                                        " arguments ('" + v + "')");
      positional.push_back(v);
    }
  }

  try {
    po::store(known, vm_);
    po::notify(vm_);
  } catch (const po::validation_error& e) {
    const std::string name = strip_dashes(e.get_option_name());
    std::string value, word = "a valid value";
    for (const auto& o : known.options)
      if (o.string_key == name && !o.value.empty()) value = o.value[0];
    for (const auto& en : entries_)
      if (en.name == name && !en.type_word.empty()) word = en.type_word;
    fail("--" + name + " '" + value + "' is not " + word);
  } catch (const po::error& e) {
    fail(e.what());
  }
  if (positional_) positional_->insert(positional_->end(), positional.begin(), positional.end());
  return true;
}

}  // namespace ht
