#include "compiler/kernels/blocked_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "framework/bf16.h"
#include "framework/error.h"

namespace kiln::jit {
namespace {

// Windows per pass over a row: the plain side goes through a [kChunk][g]
// scratch buffer (a transpose), so both layouts are read and written
// contiguously and the lane loops vectorize.
constexpr int64_t kChunk = 64;

// m, then v where v is NaN or greater, unless m is NaN already: the NaN-keeping
// maximum of kiln's pool2d (the first NaN of the window wins).
inline float MaxKeepNaN(float m, float v) { return m != m ? m : (!(v <= m) ? v : m); }

// Up to 16 lanes of one window (AVX-512), the channel group g <= 16 apart
// (16 for nChw16c, C for nhwc): the forward's maximum (into m) and the
// gradient's routing (from m and gv), as the lane loops below compute them;
// m and gv hold g floats per window.
__attribute__((target("avx512f"))) void PoolWindowsAvx512(const float* r0, const float* r1, float* m, int64_t n,
                                                          int64_t g) {
  const __mmask16 k = static_cast<__mmask16>((1u << g) - 1);
  for (int64_t j = 0; j < n; ++j) {
    __m512 v = _mm512_maskz_loadu_ps(k, r0 + 2 * g * j);
    for (const float* p : {r0 + 2 * g * j + g, r1 + 2 * g * j, r1 + 2 * g * j + g}) {
      const __m512 x = _mm512_maskz_loadu_ps(k, p);
      // Take x where it is NaN or greater, unless v is NaN already.
      const __mmask16 take = _mm512_cmp_ps_mask(x, v, _CMP_NLE_UQ) & _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
      v = _mm512_mask_mov_ps(v, take, x);
    }
    _mm512_mask_storeu_ps(m + g * j, k, v);
  }
}

__attribute__((target("avx512f"))) void PoolGradWindowsAvx512(const float* r0, const float* r1, const float* m,
                                                              const float* gv, float* d0, float* d1, int64_t n,
                                                              int64_t g, PoolGradThen then) {
  const __mmask16 k = static_cast<__mmask16>((1u << g) - 1);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = 2 * g * j;
    const __m512 mx = _mm512_maskz_loadu_ps(k, m + g * j), gg = _mm512_maskz_loadu_ps(k, gv + g * j);
    const __m512 xa = _mm512_maskz_loadu_ps(k, r0 + at), xb = _mm512_maskz_loadu_ps(k, r0 + at + g);
    const __m512 xc = _mm512_maskz_loadu_ps(k, r1 + at), xd = _mm512_maskz_loadu_ps(k, r1 + at + g);
    __mmask16 ta = _mm512_cmp_ps_mask(xa, mx, _CMP_EQ_OQ);
    __mmask16 tb = _mm512_cmp_ps_mask(xb, mx, _CMP_EQ_OQ) & ~ta;
    __mmask16 tc = _mm512_cmp_ps_mask(xc, mx, _CMP_EQ_OQ) & ~(ta | tb);
    __mmask16 td = static_cast<__mmask16>(~(ta | tb | tc));
    if (then == PoolGradThen::kReluGrad) {
      ta &= _mm512_cmp_ps_mask(xa, zero, _CMP_GT_OQ);
      tb &= _mm512_cmp_ps_mask(xb, zero, _CMP_GT_OQ);
      tc &= _mm512_cmp_ps_mask(xc, zero, _CMP_GT_OQ);
      td &= _mm512_cmp_ps_mask(xd, zero, _CMP_GT_OQ);
    }
    _mm512_mask_storeu_ps(d0 + at, k, _mm512_maskz_mov_ps(ta, gg));
    _mm512_mask_storeu_ps(d0 + at + g, k, _mm512_maskz_mov_ps(tb, gg));
    _mm512_mask_storeu_ps(d1 + at, k, _mm512_maskz_mov_ps(tc, gg));
    _mm512_mask_storeu_ps(d1 + at + g, k, _mm512_maskz_mov_ps(td, gg));
  }
}

const bool kAvx512 = __builtin_cpu_supports("avx512f");

// B: the channel group at compile time (8, 16), or 0 for `b` at run time
// (nhwc, one group of all channels). m, gv: kChunk * b floats of scratch.
template <int B>
inline void PoolRow(const float* plane, float* o, int64_t lanes, int64_t i, int64_t w, int64_t oh, int64_t ow,
                    int64_t b, float* m) {
  const int64_t bb = B > 0 ? B : b;
  const float* r0 = plane + 2 * i * w * bb;
  const float* r1 = r0 + w * bb;
  const bool wide = kAvx512 && bb <= 16;
  for (int64_t j0 = 0; j0 < ow; j0 += kChunk) {
    const int64_t n = std::min(kChunk, ow - j0);
    if (wide) PoolWindowsAvx512(r0 + 2 * j0 * bb, r1 + 2 * j0 * bb, m, n, bb);
    for (int64_t j = wide ? n : 0; j < n; ++j) {
      const float* a = r0 + 2 * (j0 + j) * bb;
      const float* c = r1 + 2 * (j0 + j) * bb;
#pragma omp simd
      for (int64_t l = 0; l < bb; ++l) {
        m[j * bb + l] = MaxKeepNaN(MaxKeepNaN(MaxKeepNaN(a[l], a[bb + l]), c[l]), c[bb + l]);
      }
    }
    for (int64_t l = 0; l < lanes; ++l) {
      float* dst = o + (l * oh + i) * ow + j0;
      for (int64_t j = 0; j < n; ++j) dst[j] = m[j * bb + l];
    }
  }
}

template <int B>
inline void PoolGradRow(const float* plane, const float* o, const float* g, float* dplane, int64_t lanes, int64_t i,
                        int64_t w, int64_t oh, int64_t ow, int64_t b, PoolGradThen then, float* m, float* gv) {
  const int64_t bb = B > 0 ? B : b;
  const bool relu = then == PoolGradThen::kReluGrad;
  const float* r0 = plane + 2 * i * w * bb;
  const float* r1 = r0 + w * bb;
  float* d0 = dplane + 2 * i * w * bb;
  float* d1 = d0 + w * bb;
  for (int64_t j0 = 0; j0 < ow; j0 += kChunk) {
    const int64_t n = std::min(kChunk, ow - j0);
    for (int64_t l = 0; l < lanes; ++l) {
      const float* src_m = o + (l * oh + i) * ow + j0;
      const float* src_g = g + (l * oh + i) * ow + j0;
      for (int64_t j = 0; j < n; ++j) {
        m[j * bb + l] = src_m[j];
        gv[j * bb + l] = src_g[j];
      }
    }
    // Padded lanes: x is 0 there, so max 0 and gradient 0 write zeros.
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t l = lanes; l < bb; ++l) m[j * bb + l] = gv[j * bb + l] = 0.f;
    }
    if (kAvx512 && bb <= 16) {
      PoolGradWindowsAvx512(r0 + 2 * j0 * bb, r1 + 2 * j0 * bb, m, gv, d0 + 2 * j0 * bb, d1 + 2 * j0 * bb, n, bb, then);
      continue;
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = 2 * (j0 + j) * bb;
#pragma omp simd
      for (int64_t l = 0; l < bb; ++l) {
        // First maximum in row-major order: a, b, c, d (branch-free).
        const float mx = m[j * bb + l], gg = gv[j * bb + l];
        const bool ta = r0[at + l] == mx;
        const bool tb = !ta && r0[at + bb + l] == mx;
        const bool tc = !ta && !tb && r1[at + l] == mx;
        const bool td = !ta && !tb && !tc;
        // relu's gradient where it follows: out > 0 ? dout : 0.
        d0[at + l] = ta && (!relu || r0[at + l] > 0.f) ? gg : 0.f;
        d0[at + bb + l] = tb && (!relu || r0[at + bb + l] > 0.f) ? gg : 0.f;
        d1[at + l] = tc && (!relu || r1[at + l] > 0.f) ? gg : 0.f;
        d1[at + bb + l] = td && (!relu || r1[at + bb + l] > 0.f) ? gg : 0.f;
      }
    }
  }
}

template <int B>
void PoolAll(const float* x, float* out, int64_t n, int64_t c, int64_t h, int64_t w, int64_t b) {
  const int64_t cb = (c + b - 1) / b, oh = h / 2, ow = w / 2;
#pragma omp parallel for schedule(static) if (n * cb * h * w * b >= 64 * 1024)
  for (int64_t p = 0; p < n * cb; ++p) {
    const int64_t img = p / cb, blk = p % cb, lanes = std::min(b, c - blk * b);
    std::vector<float> m(kChunk * b);
    for (int64_t i = 0; i < oh; ++i) {
      PoolRow<B>(x + p * h * w * b, out + (img * c + blk * b) * oh * ow, lanes, i, w, oh, ow, b, m.data());
    }
  }
}

__attribute__((target("avx512f,avx512bf16"))) void ToBf16Native(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i))));
  }
  for (; i < n; ++i) dst[i] = FloatToBf16Bits(src[i]);
}

const bool kAvx512Bf16 = __builtin_cpu_supports("avx512bf16") && kAvx512;

void ToBf16(const float* src, uint16_t* dst, int64_t n) {
  if (kAvx512Bf16) return ToBf16Native(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16Bits(src[i]);
}

// T: float, or uint16_t for bf16 (each pair of rows goes through a float
// scratch pair and is converted).
template <int B, typename T>
void PoolGradAll(const float* x, const float* out, const float* dout, T* dx, int64_t n, int64_t c, int64_t h,
                 int64_t w, int64_t b, PoolGradThen then, float* dbias) {
  const int64_t cb = (c + b - 1) / b, oh = h / 2, ow = w / 2;
  std::vector<float> partial(dbias != nullptr ? n * cb * b : 0, 0.f);  // per (image, group, lane)
#pragma omp parallel for schedule(static) if (n * cb * h * w * b >= 64 * 1024)
  for (int64_t p = 0; p < n * cb; ++p) {
    const int64_t img = p / cb, blk = p % cb, lanes = std::min(b, c - blk * b);
    const int64_t plain = (img * c + blk * b) * oh * ow;
    std::vector<float> m(kChunk * b), gv(kChunk * b), rows(std::is_same_v<T, float> ? 0 : 2 * w * b);
    for (int64_t i = 0; i < oh; ++i) {
      T* dplane = dx + p * h * w * b;
      if constexpr (std::is_same_v<T, float>) {
        PoolGradRow<B>(x + p * h * w * b, out + plain, dout + plain, dplane, lanes, i, w, oh, ow, b, then, m.data(),
                       gv.data());
      } else {
        // The row pair 2i, 2i+1 into rows (as the plane's rows 0 and 1).
        PoolGradRow<B>(x + p * h * w * b + 2 * i * w * b, out + plain + i * ow, dout + plain + i * ow,
                       rows.data(), lanes, 0, w, oh, ow, b, then, m.data(), gv.data());
        ToBf16(rows.data(), dplane + 2 * i * w * b, 2 * w * b);
        if (dbias != nullptr) {
          float* part = partial.data() + p * b;
          for (int64_t k = 0; k < 2 * w; ++k) {
            for (int64_t l = 0; l < b; ++l) part[l] += rows[k * b + l];
          }
        }
      }
    }
  }
  for (int64_t ch = 0; dbias != nullptr && ch < c; ++ch) {
    float sum = 0.f;
    for (int64_t img = 0; img < n; ++img) sum += partial[(img * cb + ch / b) * b + ch % b];
    dbias[ch] = sum;
  }
}

void PoolAny(const float* x, float* out, int64_t n, int64_t c, int64_t h, int64_t w, int64_t b) {
  KILN_CHECK(b >= 1 && (b >= c || b == 8 || b == 16));
  if (b == 16) return PoolAll<16>(x, out, n, c, h, w, b);
  if (b == 8) return PoolAll<8>(x, out, n, c, h, w, b);
  PoolAll<0>(x, out, n, c, h, w, b);
}

template <typename T>
void PoolGradAny(const float* x, const float* out, const float* dout, T* dx, int64_t n, int64_t c, int64_t h,
                 int64_t w, int64_t b, PoolGradThen then, float* dbias = nullptr) {
  KILN_CHECK(b >= 1 && (b >= c || b == 8 || b == 16));
  KILN_CHECK((dbias == nullptr || !std::is_same_v<T, float>));
  if (b == 16) return PoolGradAll<16>(x, out, dout, dx, n, c, h, w, b, then, dbias);
  if (b == 8) return PoolGradAll<8>(x, out, dout, dx, n, c, h, w, b, then, dbias);
  PoolGradAll<0>(x, out, dout, dx, n, c, h, w, b, then, dbias);
}

}  // namespace

void MaxPool2x2BlockedToPlain(const float* x, float* out, int64_t n, int64_t c, int64_t h, int64_t w, int64_t b) {
  PoolAny(x, out, n, c, h, w, b);
}

void MaxPool2x2GradPlainToBlocked(const float* x, const float* out, const float* dout, float* dx, int64_t n,
                                  int64_t c, int64_t h, int64_t w, int64_t b, PoolGradThen then) {
  PoolGradAny(x, out, dout, dx, n, c, h, w, b, then);
}

void MaxPool2x2GradPlainToBlockedBf16(const float* x, const float* out, const float* dout, uint16_t* dx, int64_t n,
                                      int64_t c, int64_t h, int64_t w, int64_t b, PoolGradThen then, float* dbias) {
  PoolGradAny(x, out, dout, dx, n, c, h, w, b, then, dbias);
}

}  // namespace kiln::jit
