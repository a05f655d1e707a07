// hpctrain bench allreduce|io|train|checkpoint|peak: nccl-tests-style microbenchmarks. Each one warms up,
// times, then checks correctness in a separate pass where that applies, and writes JSON under results/.
// This is the dispatcher; each benchmark parses its own options (bench_*.cpp, with CommandLine).

#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "base/error.hpp"
#include "base/log.hpp"

namespace ht {
int cmd_bench(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    log_raw_out("usage: hpctrain bench allreduce|io|train|checkpoint|peak [options]  (hpctrain bench <name> --help)");
    return args.empty() ? kExitUsage : kExitOk;
  }
  Args rest(args.begin() + 1, args.end());
  if (args[0] == "allreduce") return bench_allreduce(rest);
  if (args[0] == "io") return bench_io(rest);
  if (args[0] == "train") return bench_train(rest);
  if (args[0] == "checkpoint") return bench_checkpoint(rest);
  if (args[0] == "peak") return bench_peak(rest);
  throw UsageError("hpctrain bench: unknown benchmark '" + args[0] + "' (did you mean '" +
                   closest_match(args[0], {"allreduce", "io", "train", "checkpoint", "peak"}) +
                   "'?; allreduce, io, train, checkpoint, peak)");
}
}  // namespace ht
