#include "compiler/kernels/gemv.h"

#include <immintrin.h>

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
    for (int64_t j = 0; j < n; ++j) y[j] = y[j] <= 0.f ? 0.f : y[j];  // NaN stays NaN
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

namespace kiln::jit {

namespace {

// One pair of input rows: windows [j0, ow) one by one.
void MaxPoolRowScalar(const float* r0, const float* r1, const float* o, const float* g, float* d0, float* d1,
                      int64_t j0, int64_t ow) {
  for (int64_t j = j0; j < ow; ++j) {
    // First maximum in row-major order: a, b, c, d.
    // Branch-free: where the maximum sits is data, not predictable.
    const float m = o[j], gj = g[j];
    const int ta = r0[2 * j] == m;
    const int tb = (r0[2 * j + 1] == m) & !ta;
    const int tc = (r1[2 * j] == m) & !(ta | tb);
    const int td = !(ta | tb | tc);
    d0[2 * j] = gj * static_cast<float>(ta);
    d0[2 * j + 1] = gj * static_cast<float>(tb);
    d1[2 * j] = gj * static_cast<float>(tc);
    d1[2 * j + 1] = gj * static_cast<float>(td);
  }
}

// 16 windows at a time: deinterleave even/odd columns with permutes, decide
// with masks, interleave back.
__attribute__((target("avx512f"))) int64_t MaxPoolRowAvx512(const float* r0, const float* r1, const float* o,
                                                            const float* g, float* d0, float* d1, int64_t ow) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 zero = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= ow; j += 16) {
    const __m512 x0a = _mm512_loadu_ps(r0 + 2 * j), x0b = _mm512_loadu_ps(r0 + 2 * j + 16);
    const __m512 x1a = _mm512_loadu_ps(r1 + 2 * j), x1b = _mm512_loadu_ps(r1 + 2 * j + 16);
    const __m512 a = _mm512_permutex2var_ps(x0a, even, x0b), b = _mm512_permutex2var_ps(x0a, odd, x0b);
    const __m512 c = _mm512_permutex2var_ps(x1a, even, x1b);
    const __m512 m = _mm512_loadu_ps(o + j), gv = _mm512_loadu_ps(g + j);
    const __mmask16 ta = _mm512_cmp_ps_mask(a, m, _CMP_EQ_OQ);
    const __mmask16 tb = _mm512_cmp_ps_mask(b, m, _CMP_EQ_OQ) & static_cast<__mmask16>(~ta);
    const __mmask16 tc = _mm512_cmp_ps_mask(c, m, _CMP_EQ_OQ) & static_cast<__mmask16>(~(ta | tb));
    const __mmask16 td = static_cast<__mmask16>(~(ta | tb | tc));
    const __m512 ga = _mm512_mask_mov_ps(zero, ta, gv), gb = _mm512_mask_mov_ps(zero, tb, gv);
    const __m512 gc = _mm512_mask_mov_ps(zero, tc, gv), gd = _mm512_mask_mov_ps(zero, td, gv);
    _mm512_storeu_ps(d0 + 2 * j, _mm512_permutex2var_ps(ga, lo, gb));
    _mm512_storeu_ps(d0 + 2 * j + 16, _mm512_permutex2var_ps(ga, hi, gb));
    _mm512_storeu_ps(d1 + 2 * j, _mm512_permutex2var_ps(gc, lo, gd));
    _mm512_storeu_ps(d1 + 2 * j + 16, _mm512_permutex2var_ps(gc, hi, gd));
  }
  return j;
}

}  // namespace

void MaxPool2x2Grad(const float* x, const float* out, const float* dout, float* dx, int64_t planes, int64_t h,
                    int64_t w) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  const int64_t oh = h / 2, ow = w / 2;
  // Planes are independent: split them over the OpenMP threads when the work pays for it.
#pragma omp parallel for schedule(static) if (planes * h * w >= 64 * 1024)
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < oh; ++i) {
      const float* r0 = x + (p * h + 2 * i) * w;
      float* d0 = dx + (p * h + 2 * i) * w;
      const float* o = out + (p * oh + i) * ow;
      const float* g = dout + (p * oh + i) * ow;
      const int64_t done = avx512 ? MaxPoolRowAvx512(r0, r0 + w, o, g, d0, d0 + w, ow) : 0;
      MaxPoolRowScalar(r0, r0 + w, o, g, d0, d0 + w, done, ow);
    }
  }
}

}  // namespace kiln::jit
