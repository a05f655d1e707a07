// hpctrain inspect on a checkpoint file: the summary printed after reading every dataset back, with
// read_checkpoint_file's validation (the one every resume runs) and what it could not check.
#include <filesystem>
#include <sstream>
#include <string>

#include "io/checkpoint/checkpoint_format.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "src/cli/commands.hpp"

namespace fs = std::filesystem;

namespace ht {

int inspect_checkpoint(const std::string& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  log_raw_out("checkpoint " + path + " (" + (ec ? std::string("?") : checkpoint_size_text(size)) + ")");
  std::ostringstream o;  // the summary, printed with one call once read (ostream's number formats)
  try {
    CheckpointData d = read_checkpoint_file(path);
    auto geti = [&](const char* k) { return d.ints.count(k) ? std::to_string(d.ints.at(k)) : std::string("?"); };
    auto gets = [&](const char* k) { return d.strings.count(k) ? d.strings.at(k) : std::string("?"); };
    o << "  format: " << kCheckpointFormat << " version " << d.version << "\n";
    // Epochs 1-based as the console prints them ("[epoch 1] step ..."); the file stores them 0-based,
    // and a save at an epoch's end already names the next epoch with step_in_epoch 0.
    const int64_t epoch = d.ints.count("epoch") ? d.ints.at("epoch") : -1;
    const int64_t in_epoch = d.ints.count("step_in_epoch") ? d.ints.at("step_in_epoch") : -1;
    o << "  step: " << geti("step") << "  epoch: ";
    if (epoch < 0 || in_epoch < 0) o << "?";
    else if (in_epoch == 0 && epoch > 0) o << epoch << " (finished)";
    else o << epoch + 1 << " (step " << in_epoch << " of it)";
    o << "\n";
    o << "  world_size at save: " << geti("world_size") << "  global_batch: " << geti("global_batch")
      << "  seed: " << geti("seed") << "\n";
    o << "  model: " << gets("model") << "  config_hash: " << gets("config_hash") << "\n";
    int64_t params = 0, nparam = 0, buffers = 0, momentum = 0, rank_buffers = 0;
    for (auto& [n, t] : d.tensors) {
      StateGroup group;
      std::string model_name;
      if (!parse_state_tensor_name(n, &group, &model_name)) {
        if (is_rank_buffer_name(n)) rank_buffers += t.numel();
      } else if (group == StateGroup::param) {
        params += t.numel(), ++nparam;
      } else {
        (group == StateGroup::buffer ? buffers : momentum) += t.numel();
      }
    }
    o << "  parameters: " << params << " in " << nparam << " tensors;  buffers: " << buffers
      << " values;  momentum: " << momentum << " values\n";
    if (rank_buffers > 0)
      o << "  per-rank buffers: " << rank_buffers << " values (" << geti("world_size") << " ranks)\n";
    for (auto& [k, v] : d.floats) o << "  " << k << ": " << v << "\n";
    size_t ndatasets = d.tensors.size() + d.ints.size() + d.floats.size() + d.strings.size() + 1;
    o << "  checksums: OK (" << ndatasets << " datasets read back, fletcher32 verified)\n";
    // The same validation as a resume (read_checkpoint_file), less what needs a model and a config.
    o << "  checked: types, shapes and stored sizes of every dataset, the tensor index, the "
         "/rank_buffer layout, the progress counters, finite values\n";
    o << "  not checked (needs a model and a config; checked when training resumes or --init-from "
         "loads it): tensor names and shapes against the model, model.name and train.global_batch "
         "against the config, the fields a resume requires\n";
    log_raw_out(o.str());
    return kExitOk;
  } catch (const std::exception& e) {
    o << "  checksums: FAILED: " << e.what() << "\n";
    log_raw_out(o.str());
    return kExitUsage;
  }
}

}  // namespace ht
