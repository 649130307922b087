// Matrix-vector kernels for matmuls with one row (batch 1), where oneDNN's
// brgemm spends more time repacking the weights than computing: each weight
// is streamed once, in row order. Compiled for AVX-512, AVX2 and baseline
// x86-64 (GCC target_clones picks one at load time).
#pragma once

#include <cstdint>

namespace kiln::jit {

// y[N] = act(x[K] @ w[K,N] + b[N]); b may be null; relu when `relu`.
void GemvRowTimesMatrix(const float* x, const float* w, const float* b, float* y, int64_t k, int64_t n, bool relu);

// One pass over w[K,N]: dx[k] = dot(w[k,:], dy) with the old w (dx may be
// null), then w[k,:] -= lr * x[k] * dy (the weight gradient x^T dy and its
// sgd step; the gradient is never stored).
void GemvGradAndSgd(const float* x, const float* dy, float lr, float* w, float* dx, int64_t k, int64_t n);

}  // namespace kiln::jit

namespace kiln::jit {

// Gradient of 2x2, stride-2, unpadded max pooling over planes of h x w (both
// even): each input element belongs to one window; the first maximum of its
// window in row-major order (the one equal to Out) gets dOut, the rest 0.
// x, dx: [planes, h, w]; out, dout: [planes, h/2, w/2].
void MaxPool2x2Grad(const float* x, const float* out, const float* dout, float* dx, int64_t planes, int64_t h,
                    int64_t w);

}  // namespace kiln::jit
