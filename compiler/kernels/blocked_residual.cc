#include "compiler/kernels/blocked_residual.h"

namespace kiln::jit {

// Each (image, group) is one task: it reads b plain rows of hw floats and
// one grouped [hw, b] tile.
void ResidualAddReluBlocked(const float* a, const float* s, float* out, int64_t n, int64_t c, int64_t hw, int64_t b) {
  const int64_t groups = (c + b - 1) / b;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n * groups; ++t) {
    const int64_t img = t / groups, g = t % groups;
    const int64_t lanes = c - g * b < b ? c - g * b : b;
    const float* tile = a + t * hw * b;
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t plain = (img * c + g * b + l) * hw;
      for (int64_t k = 0; k < hw; ++k) {
        const float v = tile[k * b + l] + s[plain + k];
        out[plain + k] = v <= 0.f ? 0.f : v;  // NaN stays NaN
      }
    }
  }
}

void ResidualAddReluGradBlocked(const float* out, const float* dout, float* da, float* ds, int64_t n, int64_t c,
                                int64_t hw, int64_t b) {
  const int64_t groups = (c + b - 1) / b;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n * groups; ++t) {
    const int64_t img = t / groups, g = t % groups;
    const int64_t lanes = c - g * b < b ? c - g * b : b;
    float* tile = da + t * hw * b;
    for (int64_t l = lanes; l < b; ++l) {
      for (int64_t k = 0; k < hw; ++k) tile[k * b + l] = 0.f;
    }
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t plain = (img * c + g * b + l) * hw;
      for (int64_t k = 0; k < hw; ++k) {
        const float d = out[plain + k] > 0.f ? dout[plain + k] : 0.f;
        tile[k * b + l] = d;
        if (ds != nullptr) ds[plain + k] = d;
      }
    }
  }
}

}  // namespace kiln::jit
