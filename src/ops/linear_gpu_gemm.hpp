#pragma once
// The cuBLAS SGEMM calls of the fully connected layer (src/ops/linear_gpu.cu), as plain data so the
// row-major-to-column-major mapping is unit-tested on the CPU (tests/unit/test_gemm_params.cpp runs
// them through a reference column-major GEMM with BLAS semantics against ht::ref::linear_*).
//
// Tensors are row-major; cuBLAS is column-major, so a row-major [R, C] matrix is read as its
// column-major transpose [C, R] with leading dimension C:
//   y  [N,out]  = x [N,in] w^T  ->  y^T  = (w^T-as-stored)^T x^T : gemm(T, N, m=out, n=N,   k=in)
//   dx [N,in]   = dy [N,out] w  ->  dx^T = w^T-as-stored dy^T    : gemm(N, N, m=in,  n=N,   k=out)
//   dw [out,in] = dy^T x        ->  dw^T = x^T (dy^T)^T          : gemm(N, T, m=in,  n=out, k=N)
#include "src/ops/op_shapes.hpp"

namespace ht::cuda {

/// Which operand of the layer a GEMM input is.
enum class GemmOperand { x, w, dy };

/// C (m x n, column-major, leading dimension ldc) = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  GemmOperand a = GemmOperand::x, b = GemmOperand::x;
  int lda = 0, ldb = 0, ldc = 0;
};

/// y = x w^T (C is y).
inline GemmCall linear_forward_gemm(const LinearShape& sh) {
  return GemmCall{true, false, sh.out, sh.n, sh.in, GemmOperand::w, GemmOperand::x, sh.in, sh.in, sh.out};
}
/// dx = dy w (C is dx).
inline GemmCall linear_dx_gemm(const LinearShape& sh) {
  return GemmCall{false, false, sh.in, sh.n, sh.out, GemmOperand::w, GemmOperand::dy, sh.in, sh.out, sh.in};
}
/// dw = dy^T x (C is dw; beta 1 accumulates).
inline GemmCall linear_dw_gemm(const LinearShape& sh) {
  return GemmCall{false, true, sh.in, sh.out, sh.n, GemmOperand::x, GemmOperand::dy, sh.in, sh.out, sh.in};
}

}  // namespace ht::cuda
