// The fused attention's bf16 tile loops for CPUs with AVX512_BF16 (see
// attention_internal.h): Q, K, V, dOut, the probabilities and dS are
// converted to bf16 (vcvtneps2bf16: nearest even) as they are packed, and
// every product is a vdpbf16ps micro-kernel accumulating in f32. The
// softmax, its running statistics, the output rescaling and dS's formula
// stay f32, shared with the f32 kernels (attention_tiles_impl.h).
//
// Everything here is compiled for AVX512F+BW+BF16; attention_kernels.cc
// calls it only after HasAvx512Bf16(). No std:: templates below the target
// pragma (a weak instantiation compiled for AVX-512 could be the one the
// linker keeps for every caller).
#include <immintrin.h>

#include <cstdint>

#include "compiler/kernels/attention/attention_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")
#endif

namespace kiln::jit::avx512bf16 {

// The f32 tile helpers (online softmax, probabilities, dS, visibility), for
// 16-float vectors.
namespace f32 {
constexpr int kW = 16;
constexpr int kMR = 6;
constexpr int kNV = 4;
#include "compiler/kernels/attention/attention_tiles_impl.h"
}  // namespace f32

#include "compiler/kernels/attention/attention_bf16_pack.h"

namespace {

constexpr int kMR = 6;  // rows of the micro-kernel: 6 x 4 accumulators, 4 loads, 1 broadcast
constexpr int kNV = 4;

// C[MR, NV*16] (+)= A B over kp pairs: A's pair (i, l) at a[i * ars + l *
// acs] (broadcast), B's pair row l at b + l * ldb.
template <int MR, int NV>
void PairTile(int64_t kp, const uint32_t* a, int64_t ars, int64_t acs, const uint32_t* b, int64_t ldb, float* c,
              int64_t ldc, bool add) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[i][j] = add ? _mm512_loadu_ps(c + i * ldc + j * 16) : _mm512_setzero_ps();
  }
  for (int64_t l = 0; l < kp; ++l) {
    __m512i bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) bv[j] = _mm512_loadu_si512(b + l * ldb + j * 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i ai = _mm512_set1_epi32(static_cast<int>(a[i * ars + l * acs]));
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)ai, (__m512bh)bv[j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(c + i * ldc + j * 16, acc[i][j]);
  }
}

template <int MR, int NV>
void AnyPairTile(int mr, int nv, int64_t kp, const uint32_t* a, int64_t ars, int64_t acs, const uint32_t* b,
                 int64_t ldb, float* c, int64_t ldc, bool add) {
  if constexpr (MR > 1) {
    if (mr < MR) return AnyPairTile<MR - 1, NV>(mr, nv, kp, a, ars, acs, b, ldb, c, ldc, add);
  }
  if constexpr (NV > 1) {
    if (nv < NV) return AnyPairTile<MR, NV - 1>(mr, nv, kp, a, ars, acs, b, ldb, c, ldc, add);
  }
  PairTile<MR, NV>(kp, a, ars, acs, b, ldb, c, ldc, add);
}

// C[m, n] (+)= A[m, 2 kp] B[2 kp, n] in pairs, n a multiple of 16; the
// loop order of the f32 Gemm.
void PairGemm(int64_t m, int64_t n, int64_t kp, const uint32_t* a, int64_t ars, int64_t acs, const uint32_t* b,
              int64_t ldb, float* c, int64_t ldc, bool add) {
  for (int64_t j0 = 0; j0 < n; j0 += kNV * 16) {
    const int nv = static_cast<int>(f32::Min(kNV, (n - j0) / 16));
    for (int64_t i0 = 0; i0 < m; i0 += kMR) {
      AnyPairTile<kMR, kNV>(static_cast<int>(f32::Min(kMR, m - i0)), nv, kp, a + i0 * ars, ars, acs, b + j0, ldb,
                            c + i0 * ldc + j0, ldc, add);
    }
  }
}

// One head's backward panels and scratch, carved out of the two buffers.
struct Backward {
  int64_t d2, dv2, ldq, ldo, ldt, dp, dvp;
  uint32_t *qb, *dob, *kt, *vt, *dov, *qv, *kv, *pt, *dsb, *dst;
  float *dsum, *s, *dpt, *dqa, *dka, *dva;
  float *dq, *dk, *dv;
  const float* lse;
};

Backward Carve(const AttentionShape& sh, uint32_t* u, float* f) {
  Backward b;
  b.d2 = Pairs(sh.d), b.dv2 = Pairs(sh.dv), b.ldq = Padded(sh.d) / 2, b.ldo = Padded(sh.dv) / 2;
  b.ldt = TransposedLd(sh.sk, kW), b.dp = Padded(sh.d), b.dvp = Padded(sh.dv);
  auto take = [&u](int64_t n) {
    uint32_t* p = u;
    u += n;
    return p;
  };
  b.qb = take(sh.sq * b.ldq), b.dob = take(sh.sq * b.ldo), b.kt = take(b.d2 * b.ldt), b.vt = take(b.dv2 * b.ldt);
  b.dov = take(Pairs(sh.sq) * b.dvp), b.qv = take(Pairs(sh.sq) * b.dp), b.kv = take(Pairs(sh.sk) * b.dp);
  b.pt = take(kTileRows * kTileCols / 2), b.dsb = take(kTileRows * kTileCols / 2), b.dst = take(kTileRows * kTileCols / 2);
  auto takef = [&f](int64_t n) {
    float* p = f;
    f += n;
    return p;
  };
  b.dsum = takef(sh.sq), b.s = takef(kTileRows * kTileCols), b.dpt = takef(kTileRows * kTileCols);
  b.dqa = takef(sh.sq * b.dp), b.dka = takef(kTileCols * b.dp), b.dva = takef(kTileCols * b.dvp);
  return b;
}

// The products of one (key tile, query tile) pair.
void BackwardTile(const AttentionParams& p, const Backward& b, int64_t c0, int64_t cols, int64_t r0, int64_t rows) {
  const int64_t colsp = Padded(cols), rows2 = Pairs(rows);
  PairGemm(rows, colsp, b.d2, b.qb + r0 * b.ldq, b.ldq, 1, b.kt + c0, b.ldt, b.s, kTileCols, false);
  for (int64_t r = 0; r < rows; ++r) {
    f32::ProbRow(b.s + r * kTileCols, f32::Visible(r0 + r, c0, cols, p.causal), colsp, p.scale, b.lse[r0 + r]);
  }
  // A row pair past the tile multiplies zero probabilities.
  auto row_pairs = [&](const float* m, uint32_t* out) {
    for (int64_t i = 0; i < rows2; ++i) {
      InterleaveRows(m + 2 * i * kTileCols, 2 * i + 1 < rows ? m + (2 * i + 1) * kTileCols : nullptr, colsp,
                     out + i * kTileCols);
    }
  };
  if (b.dv != nullptr) {
    row_pairs(b.s, b.pt);
    PairGemm(cols, b.dvp, rows2, b.pt, 1, kTileCols, b.dov + r0 / 2 * b.dvp, b.dvp, b.dva, b.dvp, true);
  }
  if (b.dq == nullptr && b.dk == nullptr) return;
  PairGemm(rows, colsp, b.dv2, b.dob + r0 * b.ldo, b.ldo, 1, b.vt + c0, b.ldt, b.dpt, kTileCols, false);
  for (int64_t r = 0; r < rows; ++r) {
    f32::DsRow(b.s + r * kTileCols, b.dpt + r * kTileCols, colsp, p.scale, b.dsum[r0 + r]);
  }
  if (b.dq != nullptr) {
    for (int64_t r = 0; r < rows; ++r) CvtRow(b.dpt + r * kTileCols, colsp, b.dsb + r * kTileCols / 2);
    PairGemm(rows, b.dp, Pairs(cols), b.dsb, kTileCols / 2, 1, b.kv + c0 / 2 * b.dp, b.dp, b.dqa + r0 * b.dp, b.dp,
             true);
  }
  if (b.dk != nullptr) {
    row_pairs(b.dpt, b.dst);
    PairGemm(cols, b.dp, rows2, b.dst, 1, kTileCols, b.qv + r0 / 2 * b.dp, b.dp, b.dka, b.dp, true);
  }
}

}  // namespace

void PackForwardHead(const AttentionShape& sh, const float* k, const float* v, uint32_t* kt, uint32_t* vp) {
  PackTransposedPairs(k, sh.sk, sh.d, kt, TransposedLd(sh.sk, kW));
  PackRowPairs(v, sh.sk, sh.dv, vp, Padded(sh.dv));
}

void ForwardRows(const AttentionParams& p, const float* q, const uint32_t* kt, const uint32_t* vp, float* out,
                 float* lse, int64_t r0, int64_t rows, uint32_t* pair_scratch, float* float_scratch) {
  const AttentionShape& sh = p.shape;
  const int64_t ldq = Padded(sh.d) / 2, ldt = TransposedLd(sh.sk, kW), dvp = Padded(sh.dv);
  uint32_t* qb = pair_scratch;
  uint32_t* pb = qb + kTileRows * ldq;
  float* s = float_scratch;
  float* acc = s + kTileRows * kTileCols;
  float* m = acc + kTileRows * dvp;
  float* l = m + kTileRows;
  for (int64_t r = 0; r < rows; ++r) {
    CvtRow(q + (r0 + r) * sh.d, sh.d, qb + r * ldq);
    m[r] = -__builtin_inff();
    l[r] = 0.f;
    for (int64_t j = 0; j < dvp; j += 16) _mm512_storeu_ps(acc + r * dvp + j, _mm512_setzero_ps());
  }
  const int64_t kend = p.causal ? f32::Min(sh.sk, r0 + rows) : sh.sk;
  for (int64_t c0 = 0; c0 < kend; c0 += kTileCols) {
    const int64_t cols = f32::Min(kTileCols, kend - c0), colsp = Padded(cols);
    PairGemm(rows, colsp, Pairs(sh.d), qb, ldq, 1, kt + c0, ldt, s, kTileCols, false);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * kTileCols;
      const float alpha =
          f32::OnlineSoftmaxRow(row, f32::Visible(r0 + r, c0, cols, p.causal), colsp, p.scale, &m[r], &l[r]);
      if (alpha != 1.0f) {
        for (int64_t j = 0; j < dvp; j += 16) {
          _mm512_storeu_ps(acc + r * dvp + j, _mm512_mul_ps(_mm512_loadu_ps(acc + r * dvp + j), _mm512_set1_ps(alpha)));
        }
      }
      CvtRow(row, colsp, pb + r * kTileCols / 2);
    }
    // With odd cols the last pair's second key is the next one (or V's zero
    // padding): its probability is zero.
    PairGemm(rows, dvp, Pairs(cols), pb, kTileCols / 2, 1, vp + c0 / 2 * dvp, dvp, acc, dvp, true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.f ? 1.0f / l[r] : 0.f;
    for (int64_t j = 0; j < sh.dv; ++j) out[(r0 + r) * sh.dv + j] = acc[r * dvp + j] * inv;
    lse[r0 + r] = m[r] + __builtin_logf(l[r]);
  }
}

// Key tiles outside, query tiles inside, as the f32 BackwardHead; a
// gradient whose rows need no padding accumulates straight into the output.
void BackwardHead(const AttentionParams& p, const HeadArgs& a, uint32_t* pair_scratch, float* float_scratch) {
  const AttentionShape& sh = p.shape;
  Backward b = Carve(sh, pair_scratch, float_scratch);
  b.lse = a.lse, b.dq = a.dq, b.dk = a.dk, b.dv = a.dv;
  for (int64_t r = 0; r < sh.sq; ++r) {
    CvtRow(a.q + r * sh.d, sh.d, b.qb + r * b.ldq);
    CvtRow(a.dout + r * sh.dv, sh.dv, b.dob + r * b.ldo);
    float acc = 0.f;
    for (int64_t j = 0; j < sh.dv; ++j) acc += a.dout[r * sh.dv + j] * a.out[r * sh.dv + j];
    b.dsum[r] = acc;
  }
  PackTransposedPairs(a.k, sh.sk, sh.d, b.kt, b.ldt);
  PackTransposedPairs(a.v, sh.sk, sh.dv, b.vt, b.ldt);
  PackRowPairs(a.dout, sh.sq, sh.dv, b.dov, b.dvp);
  PackRowPairs(a.q, sh.sq, sh.d, b.qv, b.dp);
  PackRowPairs(a.k, sh.sk, sh.d, b.kv, b.dp);

  const bool direct_qk = b.dp == sh.d, direct_v = b.dvp == sh.dv;
  if (direct_qk && b.dq != nullptr) b.dqa = b.dq;
  if (b.dq != nullptr) f32::Zero(b.dqa, sh.sq * b.dp);
  for (int64_t c0 = 0; c0 < sh.sk; c0 += kTileCols) {
    const int64_t cols = f32::Min(kTileCols, sh.sk - c0);
    if (direct_qk && b.dk != nullptr) b.dka = b.dk + c0 * sh.d;
    if (direct_v && b.dv != nullptr) b.dva = b.dv + c0 * sh.dv;
    f32::Zero(b.dka, cols * b.dp);
    f32::Zero(b.dva, cols * b.dvp);
    for (int64_t r0 = p.causal ? c0 : 0; r0 < sh.sq; r0 += kTileRows) {
      BackwardTile(p, b, c0, cols, r0, f32::Min(kTileRows, sh.sq - r0));
    }
    if (!direct_qk && b.dk != nullptr) f32::CopyRows(b.dka, b.dp, b.dk + c0 * sh.d, cols, sh.d);
    if (!direct_v && b.dv != nullptr) f32::CopyRows(b.dva, b.dvp, b.dv + c0 * sh.dv, cols, sh.dv);
  }
  if (!direct_qk && b.dq != nullptr) f32::CopyRows(b.dqa, b.dp, b.dq, sh.sq, sh.d);
}

}  // namespace kiln::jit::avx512bf16

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
