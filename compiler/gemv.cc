#include "compiler/gemv.h"

namespace kiln::jit {

__attribute__((target_clones("avx512f", "avx2", "default"))) void GemvRowTimesMatrix(
    const float* x, const float* w, const float* b, float* y, int64_t k, int64_t n, bool relu) {
  for (int64_t j = 0; j < n; ++j) y[j] = b != nullptr ? b[j] : 0.f;
  // Row order: y += x[i] * w[i,:] streams w once, contiguously.
  for (int64_t i = 0; i < k; ++i) {
    const float xi = x[i];
    const float* row = w + i * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] += xi * row[j];
  }
  if (relu) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] = y[j] > 0.f ? y[j] : 0.f;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void GemvGradAndSgd(
    const float* x, const float* dy, float lr, float* w, float* dx, int64_t k, int64_t n) {
  for (int64_t i = 0; i < k; ++i) {
    float* row = w + i * n;
    if (dx != nullptr) {
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int64_t j = 0; j < n; ++j) acc += row[j] * dy[j];
      dx[i] = acc;
    }
    const float s = lr * x[i];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) row[j] -= s * dy[j];
  }
}

}  // namespace kiln::jit
