#pragma once
// The arguments of `hpctrain train` that are not config keys (src/cli/cmd_train.cpp).
#include <string>
#include <vector>

#include "src/train/checkpoint_manager.hpp"

namespace ht {

/// Parses --init-from PATH, --init-from=PATH and --reset-head from the arguments parse_config left
/// over (Boost.Program_options; the last --init-from wins). Throws UsageError naming anything else,
/// an --init-from without a path, or --reset-head without --init-from.
CheckpointArgs parse_checkpoint_args(const std::vector<std::string>& extra);

}  // namespace ht
