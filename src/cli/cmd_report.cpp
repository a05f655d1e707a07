// hpctrain report RUN_DIR [RUN_DIR...] [--out DIR] [--price-per-gpu-hour X] [--spot-price-per-gpu-hour Y]
//   Plots and a Markdown summary of run directories (docs/report.md). The work is done by the Python
//   tool scripts/report.py (matplotlib); this command finds it and the interpreter, then replaces
//   itself with `PYTHON report.py ARGS...`, so the tool's exit code is the command's (0 written, 2 a
//   bad RUN_DIR or option, 1 matplotlib missing or output unwritable). Runs without MPI (main.cpp
//   dispatches it before MPI_Init): it reads files only and works on a login node.
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "src/cli/commands.hpp"

namespace ht {

namespace {

bool is_file(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_executable(const std::string& p) { return is_file(p) && ::access(p.c_str(), X_OK) == 0; }

std::string dir_of(const std::string& p) {
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
}

// The directory of this executable with links resolved (a symlink in PATH points into the build or
// install tree that holds the script).
std::string exe_dir() {
  char buf[PATH_MAX];
  if (::realpath("/proc/self/exe", buf) == nullptr) return ".";
  return dir_of(buf);
}

// Where report.py may be, in order: HT_REPORT_SCRIPT; beside a build directory inside the source
// tree (SRC/build/hpctrain -> SRC/scripts); an install prefix (PREFIX/bin -> PREFIX/share/hpctrain);
// the container image (/opt/hpctrain/scripts, containers/Containerfile); the source tree this binary
// was built from.
std::vector<std::string> script_candidates() {
  std::vector<std::string> c;
  if (const char* env = std::getenv("HT_REPORT_SCRIPT"); env && *env) {
    c.emplace_back(env);
    return c;
  }
  const std::string d = exe_dir();
  c.push_back(d + "/../scripts/report.py");
  c.push_back(d + "/../share/hpctrain/report.py");
  c.push_back(d + "/scripts/report.py");
  c.emplace_back("/opt/hpctrain/scripts/report.py");
#ifdef HT_SOURCE_DIR
  c.push_back(std::string(HT_SOURCE_DIR) + "/scripts/report.py");
#endif
  return c;
}

// The interpreter: HT_PYTHON, else Debian's /usr/bin/python3 (where python3-matplotlib installs),
// else the first python3 in PATH.
std::string find_python() {
  if (const char* env = std::getenv("HT_PYTHON"); env && *env) {
    if (!is_executable(env)) throw UsageError(std::string("HT_PYTHON=") + env + ": not an executable file");
    return env;
  }
  if (is_executable("/usr/bin/python3")) return "/usr/bin/python3";
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    size_t start = 0;
    while (start <= p.size()) {
      const size_t end = std::min(p.find(':', start), p.size());
      const std::string dir = p.substr(start, end - start);
      if (!dir.empty() && is_executable(dir + "/python3")) return dir + "/python3";
      start = end + 1;
    }
  }
  throw RuntimeError("report needs python3 with matplotlib: none found (/usr/bin/python3, PATH); "
                     "install Debian's python3-matplotlib (scripts/install_deps.sh) or set HT_PYTHON");
}

}  // namespace

int cmd_report(const Args& args) {
  std::string script;
  std::string tried;
  for (const std::string& c : script_candidates()) {
    if (is_file(c)) {
      script = c;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (script.empty())
    throw RuntimeError("report: the report tool scripts/report.py was not found (looked at " + tried +
                       "); set HT_REPORT_SCRIPT to its path");
  const std::string python = find_python();
  std::vector<std::string> argv_s{python, script};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(stdout);  // stdio output of libraries, if any: its buffers do not survive execv
  std::fflush(stderr);
  ::execv(python.c_str(), argv.data());
  throw RuntimeError("report: cannot run " + python + ": " + std::strerror(errno));
}

}  // namespace ht
