#pragma once
// Shapes of the ops with geometry (NCHW activations), shared by the dispatchers (src/ops), the CPU
// halves and the GPU halves (cuda/). Plain data: the dispatcher validates them once per call.
namespace ht {

/// 2-D convolution: input [N,C,H,W], filter [K,C,R,S], output [N,K,P,Q].
struct Conv2dShape {
  int n = 0, c = 0, h = 0, w = 0;  ///< input
  int k = 0, r = 0, s = 0;         ///< output channels, filter height, filter width
  int stride = 1, pad = 0;
  int p() const { return (h + 2 * pad - r) / stride + 1; }
  int q() const { return (w + 2 * pad - s) / stride + 1; }
};

/// Fully connected: x [N,in], w [out,in], y [N,out].
struct LinearShape {
  int n = 0, in = 0, out = 0;
};

/// Max pooling: x [N,C,H,W], y [N,C,P,Q].
struct PoolShape {
  int n = 0, c = 0, h = 0, w = 0;
  int kernel = 2, stride = 2, pad = 0;
  int p() const { return (h + 2 * pad - kernel) / stride + 1; }
  int q() const { return (w + 2 * pad - kernel) / stride + 1; }
};

/// Batch normalization over N,H,W per channel: x [N,C,H,W], per-channel tensors [C].
struct BatchNormShape {
  int n = 0, c = 0, h = 0, w = 0;
  float eps = 1e-5f;
  float momentum = 0.1f;
};

}  // namespace ht
