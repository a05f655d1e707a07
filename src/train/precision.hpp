#pragma once
// train.precision -> the dtype the model computes in on the chosen device (docs/precision.md).
#include "base/tensor.hpp"
#include "src/train/config.hpp"

namespace ht {

/// f32 for fp32 and tf32 (tf32 is a GPU math mode of float32 data), bf16 or f16 otherwise. On the CPU,
/// throws UsageError (exit 2) when oneDNN cannot train in that dtype here, e.g. fp16 with oneDNN 2.6,
/// naming the ISA and suggesting bf16; never a silent fall back to fp32.
DType compute_dtype(Precision p, Device d);

/// Peak resident set size of this process in bytes (getrusage ru_maxrss), reported in run_end so that
/// the memory of each precision can be compared (host memory: activations on the CPU).
int64_t peak_rss_bytes();

}  // namespace ht
