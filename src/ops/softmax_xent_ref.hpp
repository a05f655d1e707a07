#pragma once
// Naive reference softmax cross-entropy with label smoothing (PyTorch F.cross_entropy semantics, see
// softmax_xent.hpp), templated on the element type (float/double) over raw row-major pointers, for
// tests: every quantity is computed from its definition, nothing is fused or reordered for speed.
#include <cmath>
#include <cstdint>

namespace ht::ref {

/// logits [N,K], labels [N] in [0,K) -> probs [N,K] (softmax), returns the mean over rows of
/// -sum_k target_k * log(probs_k), target_k = (1-eps)*[k == label] + eps/K. When correct is not
/// null, stores the number of rows whose first arg-max equals the label.
template <class T>
T softmax_xent_forward(const T* logits, const int32_t* labels, int n, int k, T eps, T* probs, int64_t* correct) {
  T total = 0;
  int64_t right = 0;
  for (int i = 0; i < n; ++i) {
    const T* z = logits + static_cast<int64_t>(i) * k;
    T* p = probs + static_cast<int64_t>(i) * k;
    T m = z[0];
    int arg = 0;
    for (int j = 1; j < k; ++j)
      if (z[j] > m) { m = z[j]; arg = j; }
    T s = 0;
    for (int j = 0; j < k; ++j) s += std::exp(z[j] - m);
    for (int j = 0; j < k; ++j) p[j] = std::exp(z[j] - m) / s;
    T row = 0;
    for (int j = 0; j < k; ++j) {
      const T target = (j == labels[i] ? T(1) - eps : T(0)) + eps / T(k);
      row -= target * std::log(p[j]);
    }
    total += row;
    if (arg == labels[i]) ++right;
  }
  if (correct) *correct = right;
  return total / T(n);
}

/// dlogits[n,k] = scale * (probs[n,k] - target_k) / N.
template <class T>
void softmax_xent_backward(const T* probs, const int32_t* labels, int n, int k, T eps, T scale, T* dlogits) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      const int64_t idx = static_cast<int64_t>(i) * k + j;
      const T target = (j == labels[i] ? T(1) - eps : T(0)) + eps / T(k);
      dlogits[idx] = scale * (probs[idx] - target) / T(n);
    }
}

}  // namespace ht::ref
