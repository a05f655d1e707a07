// hpctrain verify [--timeout-s S] [--min-mb-per-s R] FILE...
//   Vets each file in a separate, time-limited process (src/train/file_vetting.hpp): the child parses
//   and reads the file completely, as training, resume and inspect would (io/h5_verify.hpp), so a
//   file that makes HDF5 crash or loop is reported ("HDF5 crashed parsing FILE (SIGSEGV)", "did not
//   finish in N s") instead of taking this process down. Exit 0 when every file is good, 2 otherwise.
//   Runs without MPI (main.cpp dispatches it before MPI_Init).
// hpctrain verify --child --parent PID --max-address-bytes N FILE   (internal: the vetting child)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "io/h5_verify.hpp"
#include "base/child_process.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "base/test_faults.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "src/train/file_vetting.hpp"

namespace ht {

namespace {

// The vetting child: one file, verdict as exit code (0 good, 2 bad, 1 unreadable), text on stderr.
// It ends with _exit: after a corrupt file, HDF5's own clean-up at exit is not worth the risk.
[[noreturn]] void run_child(const std::string& path, int64_t parent, int64_t max_address_bytes) {
  harden_child_process(static_cast<size_t>(std::max<int64_t>(max_address_bytes, 0)), static_cast<long>(parent));
  int code = kExitOk;
  std::string text;
  try {
    const TestFaults& tf = TestFaults::get();
    auto matches = [&](const char* name) {
      auto v = tf.text(name);
      return v && !v->empty() && path.find(*v) != std::string::npos;
    };
    if (matches("verify.child_crash")) ::raise(SIGSEGV);
    if (matches("verify.child_hang"))
      for (;;) ::pause();
    const H5VerifyReport r = verify_h5_file(path);
    text = path + ": ok (" + std::string(r.kind ? to_string(*r.kind) : "?") + ", " + std::to_string(r.objects) + " objects, " + std::to_string(r.attributes) +
           " attributes, " + std::to_string(r.bytes_read) + " bytes of data read)";
  } catch (...) {
    code = exit_code_of(std::current_exception(), text);
  }
  text += "\n";
  log_raw_err(text);  // the parent reads it from this process's stderr
  ::_exit(code);
}

}  // namespace

int cmd_verify(const Args& args) {
  VetOptions opt;
  bool child = false;
  int64_t parent = 0, max_address_bytes = 0;
  std::vector<std::string> files;
  CommandLine cl("hpctrain verify",
                 "usage: hpctrain verify [--timeout-s S] [--min-mb-per-s R] FILE...\n"
                 "  parses and reads each HDF5 file (dataset shard, checkpoint, other) completely in a separate,\n"
                 "  time-limited process, as training and inspect would; exit 0 when all are valid, 2 otherwise");
  cl.option("timeout-s", &opt.timeout_s, "S", "time limit per file, plus its size at --min-mb-per-s")
      .option("min-mb-per-s", &opt.min_mb_per_s, "R", "read rate the time limit allows for (MB/s)")
      .flag("child", &child, "internal: be the vetting process of one file")
      .option("parent", &parent, "PID", "internal: the vetting process's parent", false)
      .option("max-address-bytes", &max_address_bytes, "N", "internal: the vetting process's address-space cap", false)
      .positional("FILE", &files, 1 << 20);
  if (!cl.parse(args)) return kExitOk;
  if (files.empty()) cl.fail("FILE required");
  if (child) {
    if (files.size() != 1) cl.fail("--child takes one FILE");
    run_child(files[0], parent, max_address_bytes);
  }
  if (!(opt.timeout_s > 0) || !(opt.min_mb_per_s > 0)) cl.fail("--timeout-s and --min-mb-per-s must be positive");
  const int width = std::clamp(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), 1, 4);
  const std::vector<VetVerdict> v = vet_files(files, opt, width);
  bool bad = false, runtime = false;
  for (const auto& r : v) {
    if (r.ok) {
      log_raw_out(r.message);
    } else {
      log_error(r.message);  // verify runs without MPI: one rank, no rank in the prefix
      (r.runtime ? runtime : bad) = true;
    }
  }
  return bad ? kExitUsage : runtime ? kExitRuntime : kExitOk;
}

}  // namespace ht
