#pragma once
// What oneDNN can do on this CPU: the instruction set it runs (dnnl::get_effective_cpu_isa, e.g.
// "avx512_core_amx", "avx512_core_bf16", "avx2") and whether it can train convolutions and linear
// layers in a low-precision dtype (probed by creating the primitive descriptors the ops use).
#include <string>

#include "base/tensor.hpp"

namespace ht {

/// The ISA oneDNN dispatches to on this CPU ("avx512_core_bf16", ...; "unknown" when unnamed).
std::string onednn_cpu_isa();

/// Whether oneDNN can train in `t` (bf16 or f16) on this CPU: forward, backward-data and
/// backward-weights convolution primitives with t activations and float32 filter gradients exist
/// (possibly emulated and slower). On false, *why names what failed. f32 is always true.
bool onednn_can_train(DType t, std::string* why);

}  // namespace ht
