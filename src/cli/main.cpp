// hpctrain: one executable, subcommands train | prepare | bench | doctor | inspect | verify | report (docs/cli.md).
// Errors become exit codes here: UsageError -> 2, anything else -> 1. With several ranks an error on
// one rank ends the whole job through MPI_Abort so that no rank waits forever in a collective.
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "base/log.hpp"
#include "mpi/collective_guard.hpp"
#include "mpi/dist.hpp"
#include "mpi/flight_recorder.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "base/error.hpp"
#include "src/train/build_info.hpp"
#include "src/train/config.hpp"
#include "src/train/signals.hpp"

namespace {

void usage() {
  ht::log_raw_out("usage: hpctrain <command> [options]\n"
               "  train    --config FILE [--section.key value ...]   train a model\n"
               "  prepare  --format fashion-mnist|cifar10|imagefolder --input DIR --output DIR [--shards N]\n"
               "  bench    allreduce|io|train|checkpoint|peak [...]  microbenchmarks (allreduce busbw, data reading,\n"
               "                                                     training images/s, checkpoint writes, peak FLOP/s)\n"
               "  doctor   [--device cpu|cuda]                       diagnose the environment\n"
               "  inspect  PATH | --validate DIR                     summarise a shard, dataset or checkpoint;\n"
               "                                                     --validate opens every shard as training does\n"
               "  verify   FILE...                                   vet HDF5 files in a time-limited process\n"
               "  report   RUN_DIR... [--out DIR]                    plots and a summary of runs (metrics.jsonl)\n"
               "  --version                                          version, commit, build and library versions\n"
               "Run 'hpctrain <command> --help' for a command's options.\n");
}

// A code returned by a command is agreed by all ranks (a clean exit); a code from an exception may be
// one rank's alone, so with several ranks it ends the job with MPI_Abort.
int finish(int code, bool from_exception) {
  // The log writes unbuffered; this flushes what libraries left in stdio before MPI_Abort.
  std::fflush(stdout);
  std::fflush(stderr);
  if (from_exception && ht::dist().world_size > 1) ht::dist_abort(code);
  ht::dist_finalize(code);
  return code;
}

// A preemption signal can come as soon as the process exists (sbatch --time at or below
// train.sbatch's USR1 lead time, a job preempted while it starts). Loading the CUDA, MPI and oneDNN
// libraries takes 0.1-0.3 s before main (their constructors), and a TERM or USR1 then would kill the
// rank (exit 138). So `hpctrain train` installs the flag handler for the default checkpoint.signals
// from the executable's .preinit_array, which the loader runs before any library's constructor: such
// a signal stops the run with a checkpoint at its first step boundary. The configured set replaces it
// once the config has been read (cmd_train.cpp).
void install_stop_signals_before_libraries(int argc, char** argv, char**) {
  if (argc >= 2 && !std::strcmp(argv[1], "train")) ht::install_stop_signals(ht::Config{}.checkpoint.signals);
}
__attribute__((section(".preinit_array"), used)) void (*const preinit_stop_signals)(int, char**, char**) =
    install_stop_signals_before_libraries;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? ht::kExitUsage : ht::kExitOk;
  }
  std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    // Before MPI: it must work on a login node and inside a container without a launcher.
    ht::log_raw_out(ht::format_build_info(ht::build_info()));
    return ht::kExitOk;
  }
  ht::Args args(argv + 2, argv + argc);
  // No MPI for verify (it is also the vetting child that ranks start, cmd_verify.cpp), for report
  // (it runs the Python tool, cmd_report.cpp, on a login node too), nor for inspect's readings of a
  // run directory's failure records (a batch script runs them between launches).
  const bool inspect_files = cmd == "inspect" && ht::inspect_reads_files_only(args);
  if (cmd == "verify" || cmd == "report" || inspect_files) {
    try {
      return cmd == "verify" ? ht::cmd_verify(args) : cmd == "report" ? ht::cmd_report(args) : ht::cmd_inspect(args);
    } catch (const ht::UsageError& e) {
      ht::log_error(e.what());  // no MPI here: one rank, so no rank in the prefix
      return ht::kExitUsage;
    } catch (const std::exception& e) {
      ht::log_fatal(e.what());
      return ht::kExitRuntime;
    }
  }
  ht::isolate_signals_to_receiver_thread();  // before MPI and every other thread (src/train/signals.hpp)
  // Every wait on peers is bounded, MPI_Init included (mpi/collective_guard.hpp); 300 s is
  // dist.timeout_s's default until a command sets the configured limit.
  ht::collective_guard_start(300);
  try {
    ht::dist_init(&argc, &argv);
  } catch (const std::exception& e) {
    ht::log_raw_err(std::string("hpctrain: MPI initialisation failed: ") + e.what());
    return ht::kExitRuntime;
  }
  int code = ht::kExitOk;
  bool from_exception = true;
  try {
    // train bounds each of its waits on peers itself (dist.timeout_s). The other commands wait on
    // peers behind local work of any length (doctor's checks, a benchmark's sizes, writing shards):
    // without limit while every peer answers a probe, so a lost node ends them too.
    std::optional<ht::CollectiveWait> wait;
    if (cmd != "train") wait.emplace("the command's exchanges between ranks", ht::WaitKind::while_peers_answer);
    if (cmd == "train") code = ht::cmd_train(args);
    else if (cmd == "prepare") code = ht::cmd_prepare(args);
    else if (cmd == "bench") code = ht::cmd_bench(args);
    else if (cmd == "doctor") code = ht::cmd_doctor(args);
    else if (cmd == "inspect") code = ht::cmd_inspect(args);
    else {
      if (ht::dist().rank == 0) {
        ht::log_raw_err("hpctrain: unknown command '" + cmd + "' (did you mean '" +
                        ht::closest_match(cmd, {"train", "prepare", "bench", "doctor", "inspect", "verify", "report", "version"}) + "'?)");
        usage();
      }
      code = ht::kExitUsage;
    }
    from_exception = false;
  } catch (const ht::CollectiveUsageError& e) {
    // Every rank raised it together: a clean exit 2 on all ranks, no MPI_Abort.
    if (e.reported) ht::log_usage_error(e.what());
    code = ht::kExitUsage;
    from_exception = false;
  } catch (const ht::UsageError& e) {
    ht::log_usage_error(e.what());
    code = ht::kExitUsage;
  } catch (const std::exception& e) {
    // The flight record first (mpi/flight_recorder.hpp): what this rank last waited on peers for.
    const std::string flight = ht::flight_recorder_dump(std::string("fatal error: ") + e.what());
    ht::log_raw_err("hpctrain: fatal (rank " + std::to_string(ht::dist().rank) + " on " + ht::dist().host + "): " + e.what() +
                    (flight.empty() ? "" : " (flight record: " + flight + ")"));
    code = ht::kExitRuntime;
  }
  return finish(code, from_exception);
}
