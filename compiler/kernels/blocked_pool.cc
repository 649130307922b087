#include "compiler/kernels/blocked_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
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
// g argmax codes (bytes) at `at` from the low g lanes of `code`.
__attribute__((target("avx512f"))) inline void StoreCodes(uint8_t* at, __m512i code, int64_t g) {
  const __m128i bytes = _mm512_maskz_cvtepi32_epi8(0xffff, code);  // (the unmasked form warns in GCC 12)
  if (g == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(at), bytes);
  } else if (g == 8) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(at), bytes);
  } else {
    alignas(16) uint8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), bytes);
    std::memcpy(at, tmp, g);
  }
}

// g argmax codes (bytes) from `at` into the low g lanes.
__attribute__((target("avx512f"))) inline __m512i LoadCodes(const uint8_t* at, int64_t g) {
  if (g == 16) return _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
  if (g == 8) return _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at)));
  alignas(16) uint8_t tmp[16] = {};
  std::memcpy(tmp, at, g);
  return _mm512_maskz_cvtepu8_epi32(0xffff, _mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
}

// ... and each window's argmax code (ArgmaxCode below) into codes, g bytes
// per window (the channel group's layout).
__attribute__((target("avx512f"))) void PoolWindowsAvx512(const float* r0, const float* r1, float* m, uint8_t* codes,
                                                          int64_t n, int64_t g) {
  const __mmask16 k = static_cast<__mmask16>((1u << g) - 1);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 x[4] = {_mm512_maskz_loadu_ps(k, r0 + 2 * g * j), _mm512_maskz_loadu_ps(k, r0 + 2 * g * j + g),
                         _mm512_maskz_loadu_ps(k, r1 + 2 * g * j), _mm512_maskz_loadu_ps(k, r1 + 2 * g * j + g)};
    __m512 v = x[0];
    for (int q = 1; q < 4; ++q) {
      // Take x where it is NaN or greater, unless v is NaN already.
      const __mmask16 take = _mm512_cmp_ps_mask(x[q], v, _CMP_NLE_UQ) & _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
      v = _mm512_mask_mov_ps(v, take, x[q]);
    }
    _mm512_mask_storeu_ps(m + g * j, k, v);
    // The first position equal to the maximum (3 when none is), and the
    // relu bit of the element there.
    __mmask16 left = 0xffff, relu = 0;
    __m512i code = _mm512_set1_epi32(3);
    for (int q = 0; q < 4; ++q) {
      const __mmask16 at = q < 3 ? static_cast<__mmask16>(_mm512_cmp_ps_mask(x[q], v, _CMP_EQ_OQ) & left) : left;
      code = _mm512_mask_mov_epi32(code, at, _mm512_set1_epi32(q));
      relu |= at & _mm512_cmp_ps_mask(x[q], zero, _CMP_GT_OQ);
      left &= static_cast<__mmask16>(~at);
    }
    code = _mm512_mask_or_epi32(code, relu, code, _mm512_set1_epi32(4));
    StoreCodes(codes + g * j, code, g);
  }
}

// Routes gv to each window's maximum from its argmax code (pos | 4 when
// that element is > 0; MaxPool2x2BlockedToPlain), zeros elsewhere, and
// applies relu's gradient there when `relu`.
__attribute__((target("avx512f"))) void PoolGradWindowsAvx512(const uint8_t* codes, const float* gv, float* d0,
                                                              float* d1, int64_t n, int64_t g, bool relu) {
  const __mmask16 k = static_cast<__mmask16>((1u << g) - 1);
  const __m512i three = _mm512_set1_epi32(3), four = _mm512_set1_epi32(4);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = 2 * g * j;
    const __m512i p = LoadCodes(codes + g * j, g);
    const __m512 gg = _mm512_maskz_loadu_ps(k, gv + g * j);
    const __m512i pos = _mm512_and_epi32(p, three);
    const __mmask16 ok = relu ? _mm512_test_epi32_mask(p, four) : static_cast<__mmask16>(0xffff);
    const __mmask16 ta = _mm512_cmpeq_epi32_mask(pos, _mm512_set1_epi32(0)) & ok;
    const __mmask16 tb = _mm512_cmpeq_epi32_mask(pos, _mm512_set1_epi32(1)) & ok;
    const __mmask16 tc = _mm512_cmpeq_epi32_mask(pos, _mm512_set1_epi32(2)) & ok;
    const __mmask16 td = _mm512_cmpeq_epi32_mask(pos, three) & ok;
    _mm512_mask_storeu_ps(d0 + at, k, _mm512_maskz_mov_ps(ta, gg));
    _mm512_mask_storeu_ps(d0 + at + g, k, _mm512_maskz_mov_ps(tb, gg));
    _mm512_mask_storeu_ps(d1 + at, k, _mm512_maskz_mov_ps(tc, gg));
    _mm512_mask_storeu_ps(d1 + at + g, k, _mm512_maskz_mov_ps(td, gg));
  }
}

const bool kAvx512 = __builtin_cpu_supports("avx512f");

// B: the channel group at compile time (8, 16), or 0 for `b` at run time
// (nhwc, one group of all channels). m, gv: kChunk * b floats of scratch.
// The argmax code of one window (a, b, c, d row-major) with maximum mx: the
// first position equal to mx (3 when none is: a NaN maximum), | 4 when the
// element there is > 0 (relu's gradient passes).
inline uint8_t ArgmaxCode(float a, float b, float c, float d, float mx) {
  const int pos = a == mx ? 0 : b == mx ? 1 : c == mx ? 2 : 3;
  const float v = pos == 0 ? a : pos == 1 ? b : pos == 2 ? c : d;
  return static_cast<uint8_t>(pos | (v > 0.f ? 4 : 0));
}

// m: kChunk * b floats of scratch; codes: the row's argmax codes, b bytes a
// window.
template <int B>
inline void PoolRow(const float* plane, float* o, uint8_t* codes, int64_t lanes, int64_t i, int64_t w, int64_t oh,
                    int64_t ow, int64_t b, float* m) {
  const int64_t bb = B > 0 ? B : b;
  const float* r0 = plane + 2 * i * w * bb;
  const float* r1 = r0 + w * bb;
  const bool wide = kAvx512 && bb <= 16;
  for (int64_t j0 = 0; j0 < ow; j0 += kChunk) {
    const int64_t n = std::min(kChunk, ow - j0);
    if (wide) PoolWindowsAvx512(r0 + 2 * j0 * bb, r1 + 2 * j0 * bb, m, codes + j0 * bb, n, bb);
    for (int64_t j = wide ? n : 0; j < n; ++j) {
      const float* a = r0 + 2 * (j0 + j) * bb;
      const float* c = r1 + 2 * (j0 + j) * bb;
      uint8_t* code = codes + (j0 + j) * bb;
#pragma omp simd
      for (int64_t l = 0; l < bb; ++l) {
        const float mx = MaxKeepNaN(MaxKeepNaN(MaxKeepNaN(a[l], a[bb + l]), c[l]), c[bb + l]);
        m[j * bb + l] = mx;
        code[l] = ArgmaxCode(a[l], a[bb + l], c[l], c[bb + l], mx);
      }
    }
    for (int64_t l = 0; l < lanes; ++l) {
      float* dst = o + (l * oh + i) * ow + j0;
      for (int64_t j = 0; j < n; ++j) dst[j] = m[j * bb + l];
    }
  }
}

// The gradient of windows j0 .. j0+n-1 of row i, grouped with the padded
// lanes 0: from the group's plain planes g (into gv), or (kGrouped) from
// its grouped rows g ([OH, OW, b]): read in place when every lane is a
// channel, else copied into gv. Returns where it is.
inline const float* GatherGrad(const float* g, PooledGradLayout layout, int64_t lanes, int64_t i, int64_t j0,
                               int64_t n, int64_t oh, int64_t ow, int64_t bb, float* gv) {
  if (layout == PooledGradLayout::kGrouped) {
    const float* row = g + (i * ow + j0) * bb;
    if (lanes == bb) return row;
    std::memcpy(gv, row, n * bb * sizeof(float));
  } else {
    for (int64_t l = 0; l < lanes; ++l) {
      const float* src_g = g + (l * oh + i) * ow + j0;
      for (int64_t j = 0; j < n; ++j) gv[j * bb + l] = src_g[j];
    }
  }
  // Padded lanes: gradient 0 writes zeros.
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t l = lanes; l < bb; ++l) gv[j * bb + l] = 0.f;
  }
  return gv;
}

// codes: the row's argmax codes, b bytes a window. g: as GatherGrad.
template <int B>
inline void PoolGradRow(const uint8_t* codes, const float* g, PooledGradLayout layout, float* dplane, int64_t lanes,
                        int64_t i, int64_t w, int64_t oh, int64_t ow, int64_t b, PoolGradThen then, float* gv) {
  const int64_t bb = B > 0 ? B : b;
  const bool relu = then == PoolGradThen::kReluGrad;
  float* d0 = dplane + 2 * i * w * bb;
  float* d1 = d0 + w * bb;
  for (int64_t j0 = 0; j0 < ow; j0 += kChunk) {
    const int64_t n = std::min(kChunk, ow - j0);
    const float* gg = GatherGrad(g, layout, lanes, i, j0, n, oh, ow, bb, gv);
    if (kAvx512 && bb <= 16) {
      PoolGradWindowsAvx512(codes + j0 * bb, gg, d0 + 2 * j0 * bb, d1 + 2 * j0 * bb, n, bb, relu);
      continue;
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = 2 * (j0 + j) * bb;
      const uint8_t* code = codes + (j0 + j) * bb;
#pragma omp simd
      for (int64_t l = 0; l < bb; ++l) {
        const int32_t p = code[l], pos = p & 3;
        // relu's gradient where it follows: out > 0 ? dout : 0.
        const float v = !relu || (p & 4) != 0 ? gg[j * bb + l] : 0.f;
        d0[at + l] = pos == 0 ? v : 0.f;
        d0[at + bb + l] = pos == 1 ? v : 0.f;
        d1[at + l] = pos == 2 ? v : 0.f;
        d1[at + bb + l] = pos == 3 ? v : 0.f;
      }
    }
  }
}

template <int B>
void PoolAll(const float* x, float* out, uint8_t* argmax, int64_t n, int64_t c, int64_t h, int64_t w, int64_t b) {
  const int64_t cb = (c + b - 1) / b, oh = h / 2, ow = w / 2;
#pragma omp parallel for schedule(static) if (n * cb * h * w * b >= 64 * 1024)
  for (int64_t p = 0; p < n * cb; ++p) {
    const int64_t img = p / cb, blk = p % cb, lanes = std::min(b, c - blk * b);
    std::vector<float> m(kChunk * b);
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t plain = (img * c + blk * b) * oh * ow;
      PoolRow<B>(x + p * h * w * b, out + plain, argmax + (p * oh + i) * ow * b, lanes, i, w, oh, ow, b, m.data());
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
void PoolGradAll(const uint8_t* argmax, const float* dout, PooledGradLayout layout, T* dx, int64_t n, int64_t c,
                 int64_t h, int64_t w, int64_t b, PoolGradThen then, float* dbias) {
  const int64_t cb = (c + b - 1) / b, oh = h / 2, ow = w / 2;
  std::vector<float> partial(dbias != nullptr ? n * cb * b : 0, 0.f);  // per (image, group, lane)
#pragma omp parallel for schedule(static) if (n * cb * h * w * b >= 64 * 1024)
  for (int64_t p = 0; p < n * cb; ++p) {
    const int64_t img = p / cb, blk = p % cb, lanes = std::min(b, c - blk * b);
    // The group's gradient: its plain planes, or its grouped rows.
    const float* g = dout + (layout == PooledGradLayout::kGrouped ? p * oh * ow * b : (img * c + blk * b) * oh * ow);
    std::vector<float> gv(kChunk * b), rows(std::is_same_v<T, float> ? 0 : 2 * w * b);
    for (int64_t i = 0; i < oh; ++i) {
      T* dplane = dx + p * h * w * b;
      if constexpr (std::is_same_v<T, float>) {
        PoolGradRow<B>(argmax + (p * oh + i) * ow * b, g, layout, dplane, lanes, i, w, oh, ow, b, then, gv.data());
      } else {
        // The row pair 2i, 2i+1 into rows (as the plane's rows 0 and 1).
        const float* gi = g + (layout == PooledGradLayout::kGrouped ? i * ow * b : i * ow);
        PoolGradRow<B>(argmax + (p * oh + i) * ow * b, gi, layout, rows.data(), lanes, 0, w, oh, ow, b, then,
                       gv.data());
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

void PoolAny(const float* x, float* out, uint8_t* argmax, int64_t n, int64_t c, int64_t h, int64_t w, int64_t b) {
  KILN_CHECK(b >= 1 && (b >= c || b == 8 || b == 16));
  if (b == 16) return PoolAll<16>(x, out, argmax, n, c, h, w, b);
  if (b == 8) return PoolAll<8>(x, out, argmax, n, c, h, w, b);
  PoolAll<0>(x, out, argmax, n, c, h, w, b);
}

template <typename T>
void PoolGradAny(const uint8_t* argmax, const float* dout, PooledGradLayout layout, T* dx, int64_t n, int64_t c,
                 int64_t h, int64_t w, int64_t b, PoolGradThen then, float* dbias = nullptr) {
  KILN_CHECK(b >= 1 && (b >= c || b == 8 || b == 16));
  KILN_CHECK((dbias == nullptr || !std::is_same_v<T, float>));
  if (b == 16) return PoolGradAll<16>(argmax, dout, layout, dx, n, c, h, w, b, then, dbias);
  if (b == 8) return PoolGradAll<8>(argmax, dout, layout, dx, n, c, h, w, b, then, dbias);
  PoolGradAll<0>(argmax, dout, layout, dx, n, c, h, w, b, then, dbias);
}

}  // namespace

void MaxPool2x2BlockedToPlain(const float* x, float* out, uint8_t* argmax, int64_t n, int64_t c, int64_t h, int64_t w,
                              int64_t b) {
  PoolAny(x, out, argmax, n, c, h, w, b);
}

void MaxPool2x2GradPlainToBlocked(const uint8_t* argmax, const float* dout, float* dx, int64_t n, int64_t c,
                                  int64_t h, int64_t w, int64_t b, PoolGradThen then, PooledGradLayout dout_layout) {
  PoolGradAny(argmax, dout, dout_layout, dx, n, c, h, w, b, then);
}

void MaxPool2x2GradPlainToBlockedBf16(const uint8_t* argmax, const float* dout, uint16_t* dx, int64_t n, int64_t c,
                                      int64_t h, int64_t w, int64_t b, PoolGradThen then, float* dbias,
                                      PooledGradLayout dout_layout) {
  PoolGradAny(argmax, dout, dout_layout, dx, n, c, h, w, b, then, dbias);
}

}  // namespace kiln::jit
