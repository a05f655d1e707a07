// hpctrain train --config FILE [--section.key value ...]: train (src/train/trainer.cpp).
#include <iostream>

#include "mpi/dist.hpp"
#include "src/cli/commands.hpp"
#include "src/train/config.hpp"
#include "src/train/resume.hpp"
#include "src/train/trainer.hpp"

namespace ht {

int cmd_train(const Args& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      if (dist().rank == 0) {
        std::cout << "usage: hpctrain train --config FILE [--section.key value ...]\nkeys:\n";
        for (const auto& k : config_keys()) std::cout << "  --" << k << "\n";
      }
      return kExitOk;
    }
  std::vector<std::string> extra;
  Config cfg = parse_config(args, &extra);
  CheckpointArgs ckpt_args = parse_checkpoint_args(extra);  // --init-from PATH, --reset-head
  if (dist().rank == 0) std::cout << "# effective config\n" << to_ini(cfg) << std::flush;
  Trainer trainer(cfg);
  CheckpointManager checkpoints(trainer, ckpt_args);  // signals, resume, periodic/final checkpoints
  checkpoints.start();
  TrainSummary s = trainer.run();
  return s.exit_code;
}

}  // namespace ht
