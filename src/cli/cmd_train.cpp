// hpctrain train --config FILE [--section.key value ...] [--init-from CHECKPOINT [--reset-head]]: train
// (src/train/trainer.cpp), checkpointing through src/train/checkpoint_manager.cpp.
#include <boost/program_options.hpp>

#include <cstdio>
#include <memory>
#include <optional>

#include "base/log.hpp"
#include "mpi/dist.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/train_args.hpp"
#include "src/train/checkpoint_manager.hpp"
#include "src/train/config.hpp"
#include "src/train/signals.hpp"
#include "src/train/run_lock.hpp"
#include "src/train/trainer.hpp"

namespace ht {

CheckpointArgs parse_checkpoint_args(const std::vector<std::string>& extra) {
  namespace po = boost::program_options;
  const std::string unknown_hint = " (config keys are --section.key; others: --init-from CHECKPOINT, --reset-head)";
  const std::string needs_path = "hpctrain train: --init-from needs a checkpoint path";
  po::options_description desc("hpctrain train");
  desc.add_options()("init-from", po::value<std::string>(), "checkpoint to load parameters (and buffers) from")(
      "reset-head", "keep the last linear layer as initialised (with --init-from)");
  // No guessing of abbreviations: "--init" is an unknown argument, not --init-from.
  const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
  po::parsed_options parsed(&desc);
  try {
    parsed = po::command_line_parser(extra).options(desc).style(style).allow_unregistered().run();
  } catch (const po::invalid_command_line_syntax& e) {
    if (e.kind() == po::invalid_command_line_syntax::missing_parameter) throw UsageError(needs_path);
    for (const auto& x : extra)  // --reset-head=VALUE
      if (x.rfind(e.get_option_name() + "=", 0) == 0)
        throw UsageError("hpctrain train: unknown argument '" + x + "'" + unknown_hint);
    throw UsageError(std::string("hpctrain train: ") + e.what());
  } catch (const po::error& e) {
    throw UsageError(std::string("hpctrain train: ") + e.what());
  }
  CheckpointArgs a;
  for (const auto& o : parsed.options) {
    if (o.unregistered || o.position_key >= 0) {
      const std::string x = o.original_tokens.empty() ? o.string_key : o.original_tokens.front();
      throw UsageError("hpctrain train: unknown argument '" + x + "'" + unknown_hint);
    }
    if (o.string_key == "reset-head") {
      a.reset_head = true;
    } else if (o.string_key == "init-from") {
      // "--init-from --x": the next argument is another option, not a path ("--init-from=--x" is a path).
      if (o.original_tokens.size() > 1 && o.value.front().rfind("--", 0) == 0) throw UsageError(needs_path);
      a.init_from = o.value.front();
    }
  }
  if (a.reset_head && a.init_from.empty())
    throw UsageError("hpctrain train: --reset-head needs --init-from CHECKPOINT");
  return a;
}

namespace {
/// `hpctrain train --help`: the arguments, then every config key with its type, default, accepted
/// values and meaning, from the key table that drives parsing (docs/config.md lists the same).
void print_train_help() {
  std::string out =
      "usage: hpctrain train [--config FILE] [--section.key value ...] [--init-from CHECKPOINT [--reset-head]]\n"
      "  --config FILE           INI file of the keys below (flags override it); configs/*.ini, docs/config.md\n"
      "  --init-from CHECKPOINT  start at step 0 from a checkpoint's parameters and buffers (another run's, or\n"
      "                          scripts/import_torch.py's); when run.dir has checkpoints the run resumes\n"
      "                          instead and says so (a requeued job)\n"
      "  --reset-head            with --init-from: re-initialise the last linear layer (a new class count)\n"
      "config keys: --section.key VALUE, or key = VALUE under [section] in the file (type, default, meaning):\n";
  std::string section;
  for (const ConfigKey& k : config_key_table()) {
    const std::string s = k.name.substr(0, k.name.find('.'));
    if (s != section) out += "[" + (section = s) + "]\n";
    const std::string accepts = !k.range.empty()     ? " (in " + k.range + ")"
                                : !k.choices.empty() ? " (one of " + k.choices + ")"
                                                     : "";
    char line[512];
    std::snprintf(line, sizeof line, "  --%-32s %-6s = %-12s %s%s\n", k.name.c_str(), k.type.c_str(),
                  k.default_text.empty() ? "\"\"" : k.default_text.c_str(), k.help.c_str(), accepts.c_str());
    out += line;
  }
  log_raw_out(out);
}
}  // namespace

int cmd_train(const Args& args) {
  if (help_requested(args)) {
    if (dist().rank == 0) print_train_help();
    return kExitOk;
  }
  std::vector<std::string> extra;
  Config cfg = parse_config(args, &extra);
  set_collective_time_limit(cfg.dist.timeout_s);  // every wait on peers from here (mpi/collective_guard.hpp)
  install_stop_signals(cfg.checkpoint.signals);  // the configured set replaces main()'s default at once
  CheckpointArgs ckpt_args = parse_checkpoint_args(extra);  // --init-from PATH, --reset-head
  // One job per run directory: rank 0 holds RUN_DIR/.owner until the process exits; every rank
  // stops together (exit 2) when another job holds it.
  std::unique_ptr<RunDirLock> owner;
  // Start-up is local work of unequal length (vetting, loading data, reading the checkpoint on rank 0):
  // its waits have no time limit while every peer answers a probe.
  std::optional<CollectiveWait> startup(std::in_place, "start-up (run lock, data, model, checkpoint to resume)",
                                        WaitKind::while_peers_answer);
  collective_usage_check([&] {
    if (dist().rank == 0) owner = std::make_unique<RunDirLock>(cfg.run.dir, kRunDirLockWaitS);
  });
  if (dist().rank == 0) {  // what this run changed; every key is in RUN_DIR/config.ini
    std::string text = "config (differs from the defaults; every key in " + cfg.run.dir + "/config.ini):";
    const auto changed = config_differences(Config{}, cfg);
    for (const auto& c : changed) text += "\n  " + c.key + " = " + c.to;
    if (changed.empty()) text += " none";
    log_info(text);
  }
  Trainer trainer(cfg, ckpt_args);  // with its checkpoints: resume, periodic and final saves
  startup.reset();
  TrainSummary s = trainer.run();
  return s.exit_code;
}

}  // namespace ht
