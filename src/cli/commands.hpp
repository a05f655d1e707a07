#pragma once
// Subcommands of the hpctrain executable. Each takes the arguments after its name, runs with MPI
// initialised (see main.cpp), and returns an exit code or throws UsageError (2) / RuntimeError (1).
// Options are parsed with CommandLine (src/cli/cli_options.hpp), the one parser of every subcommand.
#include <string>
#include <vector>

namespace ht {
using Args = std::vector<std::string>;
int cmd_train(const Args& args);    // src/cli/cmd_train.cpp
int cmd_prepare(const Args& args);  // src/cli/cmd_prepare.cpp
int cmd_bench(const Args& args);    // src/cli/cmd_bench.cpp
int cmd_doctor(const Args& args);   // src/cli/cmd_doctor.cpp
int cmd_inspect(const Args& args);  // src/cli/cmd_inspect.cpp
/// True when the inspect arguments only read a run directory's files (--flight, --failed-hosts): run
/// without MPI.
bool inspect_reads_files_only(const Args& args);
int cmd_verify(const Args& args);   // src/cli/cmd_verify.cpp (runs without MPI)
int cmd_report(const Args& args);   // src/cli/cmd_report.cpp (runs without MPI; execs scripts/report.py)
int bench_allreduce(const Args& args);  // src/cli/bench_allreduce.cpp
int bench_io(const Args& args);         // src/cli/bench_io.cpp
int bench_train(const Args& args);      // src/cli/bench_train.cpp
int bench_checkpoint(const Args& args); // src/cli/bench_checkpoint.cpp
int bench_peak(const Args& args);       // src/cli/bench_peak.cpp

/// hpctrain inspect on a checkpoint (src/cli/inspect_checkpoint.cpp): reads `path` completely and
/// prints step, epoch, world_size at save, parameter count, tensors and the checksum status
/// (every dataset read back). Returns kExitOk when valid, kExitUsage (2) when not.
int inspect_checkpoint(const std::string& path);
}  // namespace ht
