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

// Calls f(at_grouped, at_plain, padded) for every element (image, channel
// g * b + l, pixel k) of a grouped [n, c, hw] activation, its offsets in the
// grouped and the plain layout (padded: lane l past c, no plain element),
// one (image, group) a task.
template <class F>
void ForEachElement(int64_t n, int64_t c, int64_t hw, int64_t b, const F& f) {
  const int64_t groups = (c + b - 1) / b;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n * groups; ++t) {
    const int64_t img = t / groups, g = t % groups;
    const int64_t lanes = c - g * b < b ? c - g * b : b;
    for (int64_t k = 0; k < hw; ++k) {
      for (int64_t l = 0; l < b; ++l) {
        f(At(true, t, img, g, l, k, c, hw, b), At(false, t, img, g, l, k, c, hw, b), l >= lanes);
      }
    }
  }
}

}  // namespace

void ResidualAddRelu(const float* a, const float* s, float* out, int64_t n, int64_t c, int64_t hw, int64_t b,
                     const ResidualLayouts& grouped) {
  if (!grouped.s && !grouped.out) return ResidualAddReluBlocked(a, s, out, n, c, hw, b);
  ForEachElement(n, c, hw, b, [&](int64_t kept, int64_t plain, bool padded) {
    if (padded) {
      if (grouped.out) out[kept] = 0.f;
      return;
    }
    const float v = a[kept] + s[grouped.s ? kept : plain];
    out[grouped.out ? kept : plain] = v <= 0.f ? 0.f : v;  // NaN stays NaN
  });
}

void ResidualAddReluGrad(const float* out, const float* dout, float* da, float* ds, int64_t n, int64_t c, int64_t hw,
                         int64_t b, const ResidualLayouts& grouped) {
  if (!grouped.out && !grouped.dout && (ds == nullptr || !grouped.ds)) {
    return ResidualAddReluGradBlocked(out, dout, da, ds, n, c, hw, b);
  }
  ForEachElement(n, c, hw, b, [&](int64_t kept, int64_t plain, bool padded) {
    if (padded) {
      da[kept] = 0.f;
      if (ds != nullptr && grouped.ds) ds[kept] = 0.f;
      return;
    }
    const float d = out[grouped.out ? kept : plain] > 0.f ? dout[grouped.dout ? kept : plain] : 0.f;
    da[kept] = d;
    if (ds != nullptr) ds[grouped.ds ? kept : plain] = d;
  });
}

}  // namespace kiln::jit
