#pragma once
// Chooses the compute device from train.device (cpu, cuda, auto) and prepares it for this rank.
#include <string>

#include "base/tensor.hpp"
#include "src/train/config.hpp"

namespace ht {

/// cpu -> cpu; cuda -> the GPU local_rank among the visible ones, or UsageError (exit 2) saying
/// why there is none (built without CUDA, no device, driver missing or too old); automatic -> cuda
/// when a GPU is visible, cpu otherwise. Rank 0 logs the choice.
/// Collective over MPI_COMM_WORLD. allow_shared_gpu: several ranks on one GPU is intended.
Device select_device(DeviceChoice requested, int local_rank, bool allow_shared_gpu = false);

}  // namespace ht
