#pragma once
// Helpers shared by the checkpoint file tests (test_checkpoint.cpp, test_checkpoint_validate.cpp).
#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint_writer.hpp"
#include "tests/unit/temp_dir_util.hpp"

namespace ht::test {

/// An empty temporary directory for one test.
inline std::filesystem::path fresh_dir(const std::string& name) { return fresh_temp_dir("ht_ckpt", name); }

/// A float32 tensor of `shape` with distinct values near `base`.
inline Tensor filled(std::vector<int64_t> shape, float base) {
  Tensor t = Tensor::empty(shape);
  auto s = t.span<float>();
  for (size_t i = 0; i < s.size(); ++i) s[i] = base + 0.001f * static_cast<float>(i) - 1e-7f * static_cast<float>(i * i);
  return t;
}

/// A consistent checkpoint of every kind of field, at `step`; fc.weight is [10, big].
inline CheckpointData sample_data(int64_t step, int64_t big = 300) {
  CheckpointData d;
  d.tensors.emplace_back("param/conv1.weight", filled({8, 3, 3, 3}, 0.5f));
  d.tensors.emplace_back("param/fc.weight", filled({10, big}, -1.25f));
  d.tensors.emplace_back("param/fc.bias", filled({10}, 3.f));
  d.tensors.emplace_back("buffer/bn1.running_mean", filled({8}, 0.1f));
  d.tensors.emplace_back("buffer/bn1.num_batches_tracked", filled({}, 7.f));
  d.tensors.emplace_back("param/empty", Tensor::empty({0}));
  d.tensors.emplace_back("momentum/conv1.weight", filled({8, 3, 3, 3}, 2e-3f));
  d.tensors.emplace_back("momentum/fc.weight", filled({10, big}, 1e-3f));
  d.tensors.emplace_back("momentum/fc.bias", filled({10}, 4e-3f));
  d.tensors.emplace_back("momentum/empty", Tensor::empty({0}));
  // Consistent progress: 2 epochs of 100 steps and 17 of the third, plus the offset that makes
  // steps done = epoch x steps_per_epoch + step_in_epoch + epoch_offset hold for any `step`.
  d.ints = {{"step", step}, {"epoch", 2}, {"step_in_epoch", 17}, {"world_size", 2}, {"seed", -5},
            {"global_batch", 64}, {"big", int64_t(1) << 50}, {"steps_per_epoch", 100},
            {"total_steps", 1000}, {"nonfinite_in_row", 0}, {"nonfinite_total", 0},
            {"epoch_offset", step - 217}};
  d.floats = {{"lr", 0.0123456789012345}, {"loss_scale", 65536.0}};
  d.strings = {{"model", "fmnist_cnn"}, {"config", "[run]\nseed = 1\n"}, {"empty", ""}};
  return d;
}

}  // namespace ht::test
