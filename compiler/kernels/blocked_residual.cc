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

namespace {

// The element (img, channel g * b + l, pixel k) of a grouped or plain
// [n, c, hw] activation; t = img * groups + g.
inline int64_t At(bool grouped, int64_t t, int64_t img, int64_t g, int64_t l, int64_t k, int64_t c, int64_t hw,
                  int64_t b) {
  return grouped ? (t * hw + k) * b + l : (img * c + g * b + l) * hw + k;
}

}  // namespace

void ResidualAddRelu(const float* a, const float* s, float* out, int64_t n, int64_t c, int64_t hw, int64_t b,
                     const ResidualLayouts& grouped) {
  if (!grouped.s && !grouped.out) return ResidualAddReluBlocked(a, s, out, n, c, hw, b);
  const int64_t groups = (c + b - 1) / b;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n * groups; ++t) {
    const int64_t img = t / groups, g = t % groups;
    const int64_t lanes = c - g * b < b ? c - g * b : b;
    for (int64_t k = 0; k < hw; ++k) {
      for (int64_t l = 0; l < b; ++l) {
        if (l >= lanes) {
          if (grouped.out) out[At(true, t, img, g, l, k, c, hw, b)] = 0.f;
          continue;
        }
        const float v = a[At(true, t, img, g, l, k, c, hw, b)] + s[At(grouped.s, t, img, g, l, k, c, hw, b)];
        out[At(grouped.out, t, img, g, l, k, c, hw, b)] = v <= 0.f ? 0.f : v;
      }
    }
  }
}

void ResidualAddReluGrad(const float* out, const float* dout, float* da, float* ds, int64_t n, int64_t c, int64_t hw,
                         int64_t b, const ResidualLayouts& grouped) {
  if (!grouped.out && !grouped.dout && (ds == nullptr || !grouped.ds)) {
    return ResidualAddReluGradBlocked(out, dout, da, ds, n, c, hw, b);
  }
  const int64_t groups = (c + b - 1) / b;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n * groups; ++t) {
    const int64_t img = t / groups, g = t % groups;
    const int64_t lanes = c - g * b < b ? c - g * b : b;
    for (int64_t k = 0; k < hw; ++k) {
      for (int64_t l = 0; l < b; ++l) {
        const int64_t kept = At(true, t, img, g, l, k, c, hw, b);
        if (l >= lanes) {
          da[kept] = 0.f;
          if (ds != nullptr && grouped.ds) ds[kept] = 0.f;
          continue;
        }
        const float d = out[At(grouped.out, t, img, g, l, k, c, hw, b)] > 0.f
                            ? dout[At(grouped.dout, t, img, g, l, k, c, hw, b)]
                            : 0.f;
        da[kept] = d;
        if (ds != nullptr) ds[At(grouped.ds, t, img, g, l, k, c, hw, b)] = d;
      }
    }
  }
}

}  // namespace kiln::jit
