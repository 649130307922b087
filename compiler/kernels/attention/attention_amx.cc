// The fused attention's AMX tile loops (see attention_internal.h): the
// bf16 kernels' products as tdpbf16ps on 16x16 f32 tiles, with the softmax,
// its statistics and dS's formula in f32, shared with the other kernels
// (attention_tiles_impl.h). Operands are bf16 pairs (attention_bf16_pack.h),
// packed zero-padded to whole tiles: a padded pair multiplies zero, and a
// padded row of A only makes a row of C that nothing reads.
//
// Compiled for AVX512F+BW+BF16 and AMX-TILE+AMX-BF16; attention_kernels.cc
// calls it only after AmxUsable(). No std:: templates below the target
// pragma (see attention_bf16.cc).
#include <immintrin.h>

#include <cstdint>

#include "compiler/kernels/attention/attention_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")
#endif

namespace kiln::jit::amx {

namespace f32 {
constexpr int kW = 16;
constexpr int kMR = 6;
constexpr int kNV = 4;
#include "compiler/kernels/attention/attention_tiles_impl.h"
}  // namespace f32

#include "compiler/kernels/attention/attention_bf16_pack.h"

namespace {

// Tiles 0-3 hold C (a 2x2 block of 16x16 f32), 4-5 A (16 rows x 16 pairs),
// 6-7 B (16 pair rows x 16 columns): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
// A constant in memory: GCC 12 dropped the stores of a local one, as if
// ldtilecfg read only its first bytes.
constexpr TileConfig kTileConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

// C[16 MI, 16 NJ] (+)= A B over kp pairs (a multiple of 16): A's rows lda
// pairs apart, B's pair rows ldb pairs apart, C's rows ldc floats apart.
template <int MI, int NJ>
void Block(int64_t kp, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c, int64_t ldc,
           bool add) {
  const int64_t sa = lda * 4, sb = ldb * 4, sc = ldc * 4;
  if (add) {
    _tile_loadd(0, c, sc);
    if constexpr (NJ > 1) _tile_loadd(1, c + 16, sc);
    if constexpr (MI > 1) _tile_loadd(2, c + 16 * ldc, sc);
    if constexpr (MI > 1 && NJ > 1) _tile_loadd(3, c + 16 * ldc + 16, sc);
  } else {
    _tile_zero(0);
    if constexpr (NJ > 1) _tile_zero(1);
    if constexpr (MI > 1) _tile_zero(2);
    if constexpr (MI > 1 && NJ > 1) _tile_zero(3);
  }
  for (int64_t l = 0; l < kp; l += 16) {
    _tile_loadd(4, a + l, sa);
    if constexpr (MI > 1) _tile_loadd(5, a + 16 * lda + l, sa);
    _tile_loadd(6, b + l * ldb, sb);
    if constexpr (NJ > 1) _tile_loadd(7, b + l * ldb + 16, sb);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NJ > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MI > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MI > 1 && NJ > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, sc);
  if constexpr (NJ > 1) _tile_stored(1, c + 16, sc);
  if constexpr (MI > 1) _tile_stored(2, c + 16 * ldc, sc);
  if constexpr (MI > 1 && NJ > 1) _tile_stored(3, c + 16 * ldc + 16, sc);
}

// C[m, n] (+)= A[m, 2 kp] B[2 kp, n], m, n and kp multiples of 16.
void Gemm(int64_t m, int64_t n, int64_t kp, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c,
          int64_t ldc, bool add) {
  for (int64_t i0 = 0; i0 < m; i0 += 32) {
    const bool two_i = m - i0 >= 32;
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      const bool two_j = n - j0 >= 32;
      const uint32_t* ai = a + i0 * lda;
      const uint32_t* bj = b + j0;
      float* cij = c + i0 * ldc + j0;
      if (two_i && two_j) {
        Block<2, 2>(kp, ai, lda, bj, ldb, cij, ldc, add);
      } else if (two_i) {
        Block<2, 1>(kp, ai, lda, bj, ldb, cij, ldc, add);
      } else if (two_j) {
        Block<1, 2>(kp, ai, lda, bj, ldb, cij, ldc, add);
      } else {
        Block<1, 1>(kp, ai, lda, bj, ldb, cij, ldc, add);
      }
    }
  }
}

void ZeroPairs(uint32_t* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = 0;
}

// out [kr, kTileCols] pair rows of m [rows, kTileCols] (pairs of rows 2i,
// 2i + 1, columns [0, colsp)); rows past `rows` read as zero.
void RowPairs(const float* m, int64_t rows, int64_t colsp, uint32_t* out, int64_t kr) {
  for (int64_t i = 0; i < kr; ++i) {
    if (2 * i < rows) {
      InterleaveRows(m + 2 * i * kTileCols, 2 * i + 1 < rows ? m + (2 * i + 1) * kTileCols : nullptr, colsp,
                     out + i * kTileCols);
    } else {
      ZeroPairs(out + i * kTileCols, colsp);
    }
  }
}

// Lane i: i * stride.
inline __m512i Strided(int64_t stride) {
  return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                            _mm512_set1_epi32(static_cast<int>(stride)));
}

// dst[j][i] = src[i][j] for i < rows, j < cols (32-bit elements: pairs or
// floats), src's rows lds apart and dst's ldd; 16 rows of src gathered at a
// time.
void Transpose32(const void* src_v, int64_t lds, int64_t rows, int64_t cols, void* dst_v, int64_t ldd) {
  const uint32_t* src = static_cast<const uint32_t*>(src_v);
  uint32_t* dst = static_cast<uint32_t*>(dst_v);
  const __m512i idx = Strided(lds);
  for (int64_t j = 0; j < cols; ++j) {
    int64_t i = 0;
    for (; i + 16 <= rows; i += 16) {
      const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xffff, idx, src + i * lds + j, 4);
      _mm512_storeu_si512(dst + j * ldd + i, v);
    }
    for (; i < rows; ++i) dst[j * ldd + i] = src[i * lds + j];
  }
}

// dst [cols, ldd] = src [rows, cols]^T (pairs); columns [rows, ldd) zero.
void TransposePairs(const uint32_t* src, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  Transpose32(src, cols, rows, cols, dst, ldd);
  for (int64_t j = 0; j < cols; ++j) ZeroPairs(dst + j * ldd + rows, ldd - rows);
}

}  // namespace

void ConfigureTiles() { _tile_loadconfig(&kTileConfig); }

void ReleaseTiles() { _tile_release(); }

void PackForwardHead(const AttentionShape& sh, const float* k, const float* v, uint32_t* panels) {
  const int64_t ldt = TransposedLd(sh.sk, 16), kq = Tiles16(Pairs(sh.d)), dvp = Tiles16(sh.dv);
  uint32_t* kt = panels;
  uint32_t* vp = kt + kq * ldt;
  PackTransposedPairs(k, sh.sk, sh.d, kt, ldt);
  ZeroPairs(kt + Pairs(sh.d) * ldt, (kq - Pairs(sh.d)) * ldt);
  PackRowPairs(v, sh.sk, sh.dv, vp, dvp);
  ZeroPairs(vp + Pairs(sh.sk) * dvp, (Tiles16(Pairs(sh.sk)) - Pairs(sh.sk)) * dvp);
}

void ForwardRows(const AttentionParams& p, const float* q, const uint32_t* panels, float* out, float* lse,
                 int64_t r0, int64_t rows, uint32_t* pair_scratch, float* float_scratch) {
  const AttentionShape& sh = p.shape;
  const int64_t ldt = TransposedLd(sh.sk, 16), kq = Tiles16(Pairs(sh.d)), dvp = Tiles16(sh.dv);
  const int64_t rt = Tiles16(rows);
  const uint32_t* kt = panels;
  const uint32_t* vp = kt + kq * ldt;
  uint32_t* qb = pair_scratch;              // [kTileRows, kq]
  uint32_t* pb = qb + kTileRows * kq;       // [kTileRows, kTileCols / 2]
  float* s = float_scratch;                 // [kTileRows, kTileCols]
  float* acc = s + kTileRows * kTileCols;   // [kTileRows, dvp]
  float* m = acc + kTileRows * dvp;
  float* l = m + kTileRows;
  for (int64_t r = 0; r < rows; ++r) {
    CvtRowPadded(q + (r0 + r) * sh.d, sh.d, qb + r * kq, kq);
    m[r] = -__builtin_inff();
    l[r] = 0.f;
  }
  ZeroPairs(qb + rows * kq, (rt - rows) * kq);
  ZeroPairs(pb + rows * kTileCols / 2, (rt - rows) * kTileCols / 2);
  f32::Zero(acc, rt * dvp);
  const int64_t kend = p.causal ? f32::Min(sh.sk, r0 + rows) : sh.sk;
  for (int64_t c0 = 0; c0 < kend; c0 += kTileCols) {
    const int64_t cols = f32::Min(kTileCols, kend - c0), colsp = Tiles16(cols), kc = Tiles16(Pairs(cols));
    Gemm(rt, colsp, kq, qb, kq, kt + c0, ldt, s, kTileCols, false);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * kTileCols;
      const float alpha =
          f32::OnlineSoftmaxRow(row, f32::Visible(r0 + r, c0, cols, p.causal), colsp, p.scale, &m[r], &l[r]);
      if (alpha != 1.0f) {
        for (int64_t j = 0; j < dvp; j += 16) {
          _mm512_storeu_ps(acc + r * dvp + j, _mm512_mul_ps(_mm512_loadu_ps(acc + r * dvp + j), _mm512_set1_ps(alpha)));
        }
      }
      CvtRowPadded(row, colsp, pb + r * kTileCols / 2, kc);
    }
    // With odd cols the last pair's second key is the next one (or V's zero
    // padding): its probability is zero.
    Gemm(rt, dvp, kc, pb, kTileCols / 2, vp + c0 / 2 * dvp, dvp, acc, dvp, true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.f ? 1.0f / l[r] : 0.f;
    for (int64_t j = 0; j < sh.dv; ++j) out[(r0 + r) * sh.dv + j] = acc[r * dvp + j] * inv;
    lse[r0 + r] = m[r] + __builtin_logf(l[r]);
  }
}

namespace {

// One head's backward panels and scratch, carved out of the two buffers.
// kq, kdo, ksq: pairs of d, dv and sq in whole tiles; dp, dvp: d and dv in
// whole tiles.
struct Backward {
  int64_t kq, kdo, ksq, ldt, dp, dvp, kvp, rq;
  uint32_t *qb, *dob, *kt, *vt, *kv, *dot, *qt, *pt, *dst, *dsb, *tmp;
  float *dsum, *s, *dpt, *dqa, *dkt, *dvt;
  float *dq, *dk, *dv;
  const float* lse;
};

Backward Layout(const AttentionShape& sh) {
  Backward b{};
  b.kq = Tiles16(Pairs(sh.d)), b.kdo = Tiles16(Pairs(sh.dv)), b.ksq = Tiles16(Pairs(sh.sq));
  b.ldt = TransposedLd(sh.sk, 16), b.dp = Tiles16(sh.d), b.dvp = Tiles16(sh.dv), b.kvp = Tiles16(Pairs(sh.sk));
  b.rq = Tiles16(sh.sq);
  return b;
}

// Sizes of Carve's pieces, in its order.
void PairSizes(const Backward& b, int64_t sq, int64_t sizes[11]) {
  const int64_t tile_pairs = Tiles16(Pairs(kTileRows)) * kTileCols;
  const int64_t widest = b.dp > b.dvp ? b.dp : b.dvp;
  const int64_t s[11] = {b.rq * b.kq,  b.rq * b.kdo,  b.kq * b.ldt, b.kdo * b.ldt, b.kvp * b.dp,
                         b.dvp * b.ksq, b.dp * b.ksq, tile_pairs,   tile_pairs,    kTileRows * kTileCols / 2,
                         Pairs(sq) * widest};
  for (int i = 0; i < 11; ++i) sizes[i] = s[i];
}

void FloatSizes(const Backward& b, int64_t sq, int64_t sizes[6]) {
  const int64_t s[6] = {sq, kTileRows * kTileCols, kTileRows * kTileCols, b.rq * b.dp, b.dp * kTileCols,
                        b.dvp * kTileCols};
  for (int i = 0; i < 6; ++i) sizes[i] = s[i];
}

Backward Carve(const AttentionShape& sh, uint32_t* u, float* f) {
  Backward b = Layout(sh);
  int64_t ps[11], fs[6];
  PairSizes(b, sh.sq, ps);
  FloatSizes(b, sh.sq, fs);
  uint32_t** pairs[11] = {&b.qb, &b.dob, &b.kt, &b.vt, &b.kv, &b.dot, &b.qt, &b.pt, &b.dst, &b.dsb, &b.tmp};
  for (int i = 0; i < 11; ++i) *pairs[i] = u, u += ps[i];
  float** floats[6] = {&b.dsum, &b.s, &b.dpt, &b.dqa, &b.dkt, &b.dvt};
  for (int i = 0; i < 6; ++i) *floats[i] = f, f += fs[i];
  return b;
}

// Packs one head's operands (and D = rowsum(dOut * Out)).
void PackHead(const AttentionShape& sh, const avx512bf16::HeadArgs& a, const Backward& b) {
  for (int64_t r = 0; r < sh.sq; ++r) {
    CvtRowPadded(a.q + r * sh.d, sh.d, b.qb + r * b.kq, b.kq);
    CvtRowPadded(a.dout + r * sh.dv, sh.dv, b.dob + r * b.kdo, b.kdo);
    float acc = 0.f;
    for (int64_t j = 0; j < sh.dv; ++j) acc += a.dout[r * sh.dv + j] * a.out[r * sh.dv + j];
    b.dsum[r] = acc;
  }
  ZeroPairs(b.qb + sh.sq * b.kq, (b.rq - sh.sq) * b.kq);
  ZeroPairs(b.dob + sh.sq * b.kdo, (b.rq - sh.sq) * b.kdo);
  PackTransposedPairs(a.k, sh.sk, sh.d, b.kt, b.ldt);
  ZeroPairs(b.kt + Pairs(sh.d) * b.ldt, (b.kq - Pairs(sh.d)) * b.ldt);
  PackTransposedPairs(a.v, sh.sk, sh.dv, b.vt, b.ldt);
  ZeroPairs(b.vt + Pairs(sh.dv) * b.ldt, (b.kdo - Pairs(sh.dv)) * b.ldt);
  PackRowPairs(a.k, sh.sk, sh.d, b.kv, b.dp);
  ZeroPairs(b.kv + Pairs(sh.sk) * b.dp, (b.kvp - Pairs(sh.sk)) * b.dp);
  if (a.dv != nullptr) {
    PackRowPairs(a.dout, sh.sq, sh.dv, b.tmp, b.dvp);
    TransposePairs(b.tmp, Pairs(sh.sq), b.dvp, b.dot, b.ksq);
  }
  if (a.dk != nullptr) {
    PackRowPairs(a.q, sh.sq, sh.d, b.tmp, b.dp);
    TransposePairs(b.tmp, Pairs(sh.sq), b.dp, b.qt, b.ksq);
  }
}

// The products of one (key tile, query tile) pair.
void BackwardTile(const AttentionParams& p, const Backward& b, int64_t c0, int64_t cols, int64_t r0, int64_t rows) {
  const int64_t colsp = Tiles16(cols), kc = Tiles16(Pairs(cols)), rt = Tiles16(rows), kr = Tiles16(Pairs(rows));
  Gemm(rt, colsp, b.kq, b.qb + r0 * b.kq, b.kq, b.kt + c0, b.ldt, b.s, kTileCols, false);
  for (int64_t r = 0; r < rows; ++r) {
    f32::ProbRow(b.s + r * kTileCols, f32::Visible(r0 + r, c0, cols, p.causal), colsp, p.scale, b.lse[r0 + r]);
  }
  if (b.dv != nullptr) {  // dV^T += dOut^T P
    RowPairs(b.s, rows, colsp, b.pt, kr);
    Gemm(b.dvp, colsp, kr, b.dot + r0 / 2, b.ksq, b.pt, kTileCols, b.dvt, kTileCols, true);
  }
  if (b.dq == nullptr && b.dk == nullptr) return;
  Gemm(rt, colsp, b.kdo, b.dob + r0 * b.kdo, b.kdo, b.vt + c0, b.ldt, b.dpt, kTileCols, false);
  for (int64_t r = 0; r < rows; ++r) {
    f32::DsRow(b.s + r * kTileCols, b.dpt + r * kTileCols, colsp, p.scale, b.dsum[r0 + r]);
  }
  if (b.dq != nullptr) {  // dQ += dS K
    for (int64_t r = 0; r < rows; ++r) CvtRowPadded(b.dpt + r * kTileCols, colsp, b.dsb + r * kTileCols / 2, kc);
    ZeroPairs(b.dsb + rows * kTileCols / 2, (rt - rows) * kTileCols / 2);
    Gemm(rt, b.dp, kc, b.dsb, kTileCols / 2, b.kv + c0 / 2 * b.dp, b.dp, b.dqa + r0 * b.dp, b.dp, true);
  }
  if (b.dk != nullptr) {  // dK^T += Q^T dS
    RowPairs(b.dpt, rows, colsp, b.dst, kr);
    Gemm(b.dp, colsp, kr, b.qt + r0 / 2, b.ksq, b.dst, kTileCols, b.dkt, kTileCols, true);
  }
}

}  // namespace

int64_t BackwardPairScratch(const AttentionShape& sh) {
  int64_t s[11], total = 0;
  PairSizes(Layout(sh), sh.sq, s);
  for (int64_t n : s) total += n;
  return total;
}

int64_t BackwardFloatScratch(const AttentionShape& sh) {
  int64_t s[6], total = 0;
  FloatSizes(Layout(sh), sh.sq, s);
  for (int64_t n : s) total += n;
  return total;
}

void BackwardHead(const AttentionParams& p, const avx512bf16::HeadArgs& a, uint32_t* pair_scratch,
                  float* float_scratch) {
  const AttentionShape& sh = p.shape;
  Backward b = Carve(sh, pair_scratch, float_scratch);
  b.lse = a.lse, b.dq = a.dq, b.dk = a.dk, b.dv = a.dv;
  PackHead(sh, a, b);
  if (b.dq != nullptr) f32::Zero(b.dqa, b.rq * b.dp);
  for (int64_t c0 = 0; c0 < sh.sk; c0 += kTileCols) {
    const int64_t cols = f32::Min(kTileCols, sh.sk - c0);
    f32::Zero(b.dkt, b.dp * kTileCols);
    f32::Zero(b.dvt, b.dvp * kTileCols);
    for (int64_t r0 = p.causal ? c0 : 0; r0 < sh.sq; r0 += kTileRows) {
      BackwardTile(p, b, c0, cols, r0, f32::Min(kTileRows, sh.sq - r0));
    }
    if (b.dk != nullptr) Transpose32(b.dkt, kTileCols, sh.d, cols, b.dk + c0 * sh.d, sh.d);
    if (b.dv != nullptr) Transpose32(b.dvt, kTileCols, sh.dv, cols, b.dv + c0 * sh.dv, sh.dv);
  }
  if (b.dq != nullptr) f32::CopyRows(b.dqa, b.dp, b.dq, sh.sq, sh.d);
}

}  // namespace kiln::jit::amx

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
