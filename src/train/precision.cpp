#include "src/train/precision.hpp"

#include <sys/resource.h>

#include <string>

#include "src/ops/cpu_precision.hpp"

namespace ht {

DType compute_dtype(Precision p, Device d) {
  const DType t = p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
  if (t == DType::f32 || d != Device::cpu) return t;
  std::string why;
  if (onednn_can_train(t, &why)) return t;
  const std::string name = p == Precision::bf16 ? "bf16" : "fp16";
  throw UsageError("train.precision = " + name + ": oneDNN cannot train in " + name + " on this CPU (oneDNN ISA " +
                   onednn_cpu_isa() + "): " + why +
                   (t == DType::f16 ? "; use train.precision = bf16 (or fp16 on a GPU)"
                                    : "; use train.precision = fp32 on this CPU"));
}

int64_t peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux: kilobytes
}

}  // namespace ht
