// Convolution algorithm selection (see conv2d_gpu_algo.hpp). Host code without cuDNN, built in every build.
#include "src/ops/conv2d_gpu_algo.hpp"

#include <sstream>

namespace ht::cuda {

namespace {
/// Why `p` is refused before its workspace is re-queried; "" when it is a candidate.
std::string refusal(ConvPass pass, const ConvAlgoPerf& p, size_t cap, bool deterministic, bool allow_tf32) {
  if (!p.status_ok) return "not supported";
  if (!conv_run_math(p, allow_tf32)) return std::string(conv_math_name(p.math)) + " not allowed";
  if (deterministic && (!p.deterministic || conv_algo_nondeterministic(pass, p.algo))) return "non-deterministic";
  if (p.memory > cap) return "workspace " + std::to_string(p.memory) + " B over the cap";
  return "";
}

const char* pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward: return "forward";
    case ConvPass::backward_data: return "backward-data";
    case ConvPass::backward_filter: return "backward-filter";
  }
  return "?";
}
}  // namespace

bool conv_algo_nondeterministic(ConvPass pass, int algo) {
  switch (pass) {
    case ConvPass::forward: return false;
    case ConvPass::backward_data: return algo == 0;
    case ConvPass::backward_filter: return algo == 0 || algo == 3;
  }
  return true;
}

ConvMath conv_base_math(bool allow_tf32, bool low_precision) {
  if (low_precision) return ConvMath::tensor_op;
  return allow_tf32 ? ConvMath::default_math : ConvMath::fma;
}

std::optional<ConvMath> conv_run_math(const ConvAlgoPerf& p, bool allow_tf32) {
  switch (p.math) {
    case ConvMath::tensor_op_allow_conversion: return std::nullopt;  // FP32 rounded to FP16: never
    case ConvMath::tensor_op: return allow_tf32 ? std::optional<ConvMath>(ConvMath::tensor_op) : std::nullopt;
    case ConvMath::default_math:
      // With TF32 allowed, DEFAULT_MATH permits TF32 on sm_80+; in strict mode the descriptor keeps
      // FMA_MATH (DEFAULT_MATH would permit TF32 too).
      return allow_tf32 ? ConvMath::default_math : ConvMath::fma;
    case ConvMath::fma: return ConvMath::fma;
  }
  return std::nullopt;
}

std::optional<ConvAlgoChoice> choose_conv_algo(
    ConvPass pass, const std::vector<ConvAlgoPerf>& perfs, size_t workspace_cap, bool deterministic, bool allow_tf32,
    const std::function<std::optional<size_t>(int algo, ConvMath math)>& workspace_of) {
  for (const ConvAlgoPerf& p : perfs) {
    if (!refusal(pass, p, workspace_cap, deterministic, allow_tf32).empty()) continue;
    const ConvMath math = *conv_run_math(p, allow_tf32);
    const std::optional<size_t> ws = workspace_of(p.algo, math);
    if (!ws || *ws > workspace_cap) continue;
    return ConvAlgoChoice{p.algo, math, *ws};
  }
  return std::nullopt;
}

const char* conv_math_name(ConvMath m) {
  switch (m) {
    case ConvMath::default_math: return "DEFAULT_MATH";
    case ConvMath::tensor_op: return "TENSOR_OP_MATH";
    case ConvMath::tensor_op_allow_conversion: return "TENSOR_OP_MATH_ALLOW_CONVERSION";
    case ConvMath::fma: return "FMA_MATH";
  }
  return "?";
}

std::string no_conv_algo_message(ConvPass pass, const std::string& shape_text, const std::vector<ConvAlgoPerf>& perfs,
                                 size_t workspace_cap, bool deterministic, bool allow_tf32) {
  std::ostringstream os;
  os << "conv2d: cuDNN offers no " << pass_name(pass) << " algorithm for " << shape_text << " within the workspace cap of "
     << (workspace_cap >> 20) << " MiB" << (deterministic ? " among deterministic algorithms" : "")
     << (allow_tf32 ? "" : " in strict FP32") << " (";
  if (perfs.empty()) os << "no algorithm returned";
  for (size_t i = 0; i < perfs.size(); ++i) {
    const std::string why = refusal(pass, perfs[i], workspace_cap, deterministic, allow_tf32);
    os << (i ? "; " : "") << "algo " << perfs[i].algo << ": "
       << (why.empty() ? "workspace query failed or over the cap" : why);
  }
  os << "); raise --cuda.workspace_mb" << (deterministic ? " or turn off --train.deterministic" : "");
  return os.str();
}

}  // namespace ht::cuda
