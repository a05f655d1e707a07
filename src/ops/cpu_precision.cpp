#include "src/ops/cpu_precision.hpp"

#include "src/ops/dnnl_util.hpp"

namespace ht {

std::string onednn_cpu_isa() {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41: return "sse41";
    case isa::avx: return "avx";
    case isa::avx2: return "avx2";
    case isa::avx2_vnni: return "avx2_vnni";
    case isa::avx512_mic: return "avx512_mic";
    case isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case isa::avx512_core: return "avx512_core";
    case isa::avx512_core_vnni: return "avx512_core_vnni";
    case isa::avx512_core_bf16: return "avx512_core_bf16";
    case isa::avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
  }
}

bool onednn_can_train(DType t, std::string* why) {
  if (t == DType::f32) return true;
  namespace du = dnnl_util;
  using memory = dnnl::memory;
  try {
    // A ResNet-like 3x3 layer, NHWC activations as the ops give them.
    const memory::dims x{2, 16, 8, 8}, w{16, 16, 3, 3}, s{1, 1}, p{1, 1};
    const auto d = du::dnnl_dtype(t);
    const memory::desc xd(x, d, memory::format_tag::nhwc), wd(w, d, memory::format_tag::any),
        dwd(w, memory::data_type::f32, memory::format_tag::any);
    const auto alg = dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::primitive_desc fwd(
        {dnnl::prop_kind::forward_training, alg, xd, wd, xd, s, p, p}, du::engine());
    dnnl::convolution_backward_data::primitive_desc bwd_d({alg, xd, wd, xd, s, p, p}, du::engine(), fwd);
    dnnl::convolution_backward_weights::primitive_desc bwd_w({alg, xd, dwd, xd, s, p, p}, du::engine(), fwd);
    return true;
  } catch (const dnnl::error& e) {
    if (why) *why = std::string("oneDNN has no ") + dtype_name(t) + " convolution training primitives for ISA " +
                    onednn_cpu_isa() + " (" + e.what() + ")";
    return false;
  } catch (const RuntimeError& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace ht
