// bf16 matmuls and convolutions need oneDNN's AVX512_CORE kernels at least;
// on a CPU without them kiln refuses --amp bf16 at start-up and the tests
// that run bf16 kernels skip, saying why. Also the per-element bf16 bound
// the op tests check (docs/jit.md, "Mixed precision"; derived in
// amp_bf16_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/onednn/handlers.h"
#include "framework/onednn/onednn_handler.h"
#include "framework/onednn/settings.h"
#include "framework/tensor.h"

#define KILN_SKIP_WITHOUT_BF16()                                                               \
  do {                                                                                         \
    std::string kiln_bf16_why;                                                                 \
    if (!::kiln::onednn::Bf16KernelsAvailable(&kiln_bf16_why)) {                               \
      GTEST_SKIP() << "this CPU has no fast bf16 matmul or convolution in oneDNN: " << kiln_bf16_why; \
    }                                                                                          \
  } while (0)

namespace kiln::test {

// |t| elementwise (f32).
inline Tensor Abs(const Tensor& t) {
  Tensor a(DataType::kFP32, t.dims());
  float* p = a.mutable_data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) p[i] = std::fabs(t.data<float>()[i]);
  return a;
}

// The settings of a run under --amp bf16: the framework's matmul and conv2d
// kernels multiply in bf16.
inline onednn::Settings AmpBf16() {
  onednn::Settings s;
  s.amp_compute = ComputeType::kBF16;
  return s;
}

// For inputs uniform in [-2, 2): a dot product of length k is off by at
// most 2^-7 (1 + 2^-7) * sum |a b| (docs/jit.md, "Mixed precision"), and
// sum |a b| <= 4k; the absolute tolerance of the lowering tests.
inline double Bf16Atol(int64_t k) { return std::ldexp(1.0, -7) * (1 + std::ldexp(1.0, -7)) * 4.0 * k; }

struct Bf16Worst {
  double ratio = 0;  // max |bf16 - f32| / sum |a b|: 0 means bf16 never ran
  std::string failure;
};

// Checks `got` (bf16) against `ref` (f32 reference) elementwise with
//   |bf16 - f32| <= (2^-7 (1 + 2^-7) + 2 k 2^-24) * sum_k |a_k b_k|,
// where `abs_ref` is sum_k |a_k b_k| per element and `k` the longest
// contraction.
inline Bf16Worst CheckBf16Bound(const Tensor& got, const Tensor& ref, const Tensor& abs_ref, int64_t k,
                                const std::string& what) {
  Bf16Worst w;
  if (got.dims() != ref.dims()) return {0, what + ": dims " + DimsToString(got.dims())};
  const double rel = std::ldexp(1.0, -7) * (1 + std::ldexp(1.0, -7)) + 2.0 * k * std::ldexp(1.0, -24);
  const float* g = got.data<float>();
  const float* r = ref.data<float>();
  const float* a = abs_ref.data<float>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double err = std::fabs(double(g[i]) - r[i]);
    if (a[i] > 0) w.ratio = std::max(w.ratio, err / a[i]);
    if (err > rel * a[i] * (1 + 1e-6) + 1e-30 && w.failure.empty()) {
      w.failure = what + " element " + std::to_string(i) + ": bf16 " + std::to_string(g[i]) + ", f32 " +
                  std::to_string(r[i]) + ", bound " + std::to_string(rel * a[i]);
    }
  }
  return w;
}

}  // namespace kiln::test
