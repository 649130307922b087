// The f32 tile loops of the fused attention kernels, for one vector ISA.
// attention_kernels.cc includes this file twice, inside namespace
// kiln::jit::avx512 and kiln::jit::avx2 under `#pragma GCC target`
// (attention_bf16.cc and attention_amx.cc once more each, for their softmax
// helpers), after defining
// (besides kTileRows, kTileCols and BackwardHeadArgs of attention_internal.h)
//   kW   floats per vector (16, 8),
//   kMR  rows and kNV vectors of the micro-kernel's register block
//        (kMR * kNV accumulators + kNV loads + 1 broadcast fit the ISA's
//        vector registers: 6 x 4 of 32 zmm, 6 x 2 of 16 ymm).
// No includes and no std:: templates here: everything this file defines is
// compiled for its ISA and named within that namespace only.
//
// Panels (attention_kernels.cc packs them per head; widths rounded up to kW
// with zero columns): kt = K^T [d, ldt], vt = V^T [dv, ldt], vp = V
// [sk, dvp], kp = K [sk, dp], qp = Q [sq, dp], dop = dOut [sq, dvp]; ldt is
// sk rounded up plus one vector, so that the rows of a transposed panel do
// not all fall into the same L1 sets when sk is a multiple of 1024.

typedef float Vec __attribute__((vector_size(kW * sizeof(float))));
typedef int32_t IVec __attribute__((vector_size(kW * sizeof(float))));

inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t RoundUp(int64_t n) { return (n + kW - 1) / kW * kW; }
inline Vec LoadV(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreV(float* p, Vec v) { __builtin_memcpy(p, &v, sizeof v); }
inline Vec Splat(float x) { return Vec{} + x; }
// Lanes [0, n) set (n may be <= 0 or >= kW).
inline IVec LanesBelow(int64_t n) {
  IVec lane;
  for (int i = 0; i < kW; ++i) lane[i] = i;
  return lane < static_cast<int32_t>(n < 0 ? 0 : n > kW ? kW : n);
}
inline float SumV(Vec v) {
  float s = 0.f;
  for (int i = 0; i < kW; ++i) s += v[i];
  return s;
}
inline float MaxV(Vec v) {
  float m = v[0];
  for (int i = 1; i < kW; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// x rounded to the nearest bf16, ties to even, as an f32 (the low 16 bits
// zero); NaN stays NaN. The bf16 compute of CPUs without AVX512_BF16.
inline Vec RoundBf16(Vec x) {
  typedef uint32_t UVec __attribute__((vector_size(kW * sizeof(float))));
  const UVec u = (UVec)x;
  const UVec r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return x != x ? x : (Vec)r;
}

// dst[0, n) = RoundBf16(src[0, n)), n a multiple of kW (dst may be src).
inline void RoundRow(const float* src, float* dst, int64_t n) {
  for (int64_t c = 0; c < n; c += kW) StoreV(dst + c, RoundBf16(LoadV(src + c)));
}

// exp(x), Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two
// for an exact product), a degree-6 polynomial for e^r, 2^n from the
// exponent bits; relative error below 2 ulp. x below -87.34 (e^x under
// FLT_MIN, and -inf) gives 0; NaN stays NaN; x is at most 0 in these kernels.
inline Vec ExpV(Vec x) {
  const IVec under = x < -87.3365f;
  x = x > 88.0f ? Splat(88.0f) : x;
  x = x < -87.3365f ? Splat(-87.3365f) : x;
  // Adding 1.5 * 2^23 rounds x * log2(e) to an integer held in the low
  // mantissa bits.
  const Vec magic = Splat(12582912.0f);
  const Vec t = x * 1.44269504088896341f + magic;
  const Vec n = t - magic;
  const Vec r = x - n * 0.693359375f - n * -2.12194440e-4f;
  Vec p = Splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const IVec e = (((IVec)t - (IVec)magic) + 127) << 23;
  const Vec y = p * (Vec)e;
  return under ? Vec{} : y;
}

// C[MR, NV*kW] (+)= A[MR, k] B[k, NV*kW]: A(i, l) = a[i * ars + l * acs]
// (broadcast, so A may be a transposed view), B row l at b + l * ldb.
template <int MR, int NV>
void MicroTile(int64_t k, const float* a, int64_t ars, int64_t acs, const float* b, int64_t ldb, float* c,
               int64_t ldc, bool add) {
  Vec acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[i][j] = add ? LoadV(c + i * ldc + j * kW) : Vec{};
  }
  for (int64_t l = 0; l < k; ++l) {
    Vec bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) bv[j] = LoadV(b + l * ldb + j * kW);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const float ai = a[i * ars + l * acs];
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[i][j] += ai * bv[j];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) StoreV(c + i * ldc + j * kW, acc[i][j]);
  }
}

// MicroTile<mr, nv> for run-time mr <= MR, nv <= NV.
template <int MR, int NV>
void AnyTile(int mr, int nv, int64_t k, const float* a, int64_t ars, int64_t acs, const float* b, int64_t ldb,
             float* c, int64_t ldc, bool add) {
  if constexpr (MR > 1) {
    if (mr < MR) return AnyTile<MR - 1, NV>(mr, nv, k, a, ars, acs, b, ldb, c, ldc, add);
  }
  if constexpr (NV > 1) {
    if (nv < NV) return AnyTile<MR, NV - 1>(mr, nv, k, a, ars, acs, b, ldb, c, ldc, add);
  }
  MicroTile<MR, NV>(k, a, ars, acs, b, ldb, c, ldc, add);
}

// C[m, n] (+)= A[m, k] B[k, n] with n a multiple of kW. Column panels
// outside, row blocks inside: a panel of B (k x kNV*kW) stays in L1 while
// the row blocks pass.
void Gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs, const float* b, int64_t ldb,
          float* c, int64_t ldc, bool add) {
  for (int64_t j0 = 0; j0 < n; j0 += kNV * kW) {
    const int nv = static_cast<int>(Min(kNV, (n - j0) / kW));
    for (int64_t i0 = 0; i0 < m; i0 += kMR) {
      AnyTile<kMR, kNV>(static_cast<int>(Min(kMR, m - i0)), nv, k, a + i0 * ars, ars, acs, b + j0, ldb,
                        c + i0 * ldc + j0, ldc, add);
    }
  }
}

// Keys row `row` sees among [c0, c0 + cols).
inline int64_t Visible(int64_t row, int64_t c0, int64_t cols, bool causal) {
  if (!causal) return cols;
  const int64_t n = row + 1 - c0;
  return n < 0 ? 0 : n > cols ? cols : n;
}

// One row of a forward tile: s holds the raw scores q.k of `colsp` keys, the
// first n visible. Turns them into exp(scale * s - m') (0 past n) with m' the
// new running maximum, updates the running maximum *m and sum *l, and
// returns the factor exp(m - m') the row's output accumulator needs.
inline float OnlineSoftmaxRow(float* s, int64_t n, int64_t colsp, float scale, float* m, float* l) {
  if (n == 0) {
    for (int64_t c = 0; c < colsp; c += kW) StoreV(s + c, Vec{});
    return 1.0f;
  }
  const Vec neg_inf = Splat(-__builtin_inff());
  Vec vmax = neg_inf;
  for (int64_t c = 0; c < n; c += kW) {
    const Vec x = LanesBelow(n - c) ? LoadV(s + c) * scale : neg_inf;
    vmax = x > vmax ? x : vmax;
  }
  const float mt = MaxV(vmax) > *m ? MaxV(vmax) : *m;
  Vec sum = Vec{};
  for (int64_t c = 0; c < colsp; c += kW) {
    const Vec e = LanesBelow(n - c) ? ExpV(LoadV(s + c) * scale - mt) : Vec{};
    StoreV(s + c, e);
    sum += e;
  }
  const float alpha = __builtin_expf(*m - mt);  // 0 on the first tile (m = -inf)
  *l = *l * alpha + SumV(sum);
  *m = mt;
  return alpha;
}

// Rows [r0, r0 + rows) of one head's forward: q [sq, d] (the head's),
// panels kt (row stride ldt) and vp, out [sq, dv], lse [sq]; scratch s [kTileRows,
// kTileCols], acc [kTileRows, dvp], m and l [kTileRows].
void ForwardRows(const AttentionParams& p, const float* q, const float* kt, int64_t ldt, const float* vp, float* out,
                 float* lse, int64_t r0, int64_t rows, float* s, float* acc, float* m, float* l) {
  const AttentionShape& sh = p.shape;
  const int64_t dvp = RoundUp(sh.dv);
  for (int64_t r = 0; r < rows; ++r) {
    m[r] = -__builtin_inff();
    l[r] = 0.f;
    for (int64_t j = 0; j < dvp; j += kW) StoreV(acc + r * dvp + j, Vec{});
  }
  const int64_t kend = p.causal ? Min(sh.sk, r0 + rows) : sh.sk;
  for (int64_t c0 = 0; c0 < kend; c0 += kTileCols) {
    const int64_t cols = Min(kTileCols, kend - c0), colsp = RoundUp(cols);
    Gemm(rows, colsp, sh.d, q + r0 * sh.d, sh.d, 1, kt + c0, ldt, s, kTileCols, false);
    for (int64_t r = 0; r < rows; ++r) {
      const float alpha = OnlineSoftmaxRow(s + r * kTileCols, Visible(r0 + r, c0, cols, p.causal), colsp, p.scale,
                                           &m[r], &l[r]);
      // bf16 compute (the caller rounded q and the panels): the product with
      // V multiplies rounded probabilities; the row sum l stays unrounded.
      if (p.compute == ComputeType::kBF16) RoundRow(s + r * kTileCols, s + r * kTileCols, colsp);
      if (alpha == 1.0f) continue;
      for (int64_t j = 0; j < dvp; j += kW) StoreV(acc + r * dvp + j, LoadV(acc + r * dvp + j) * alpha);
    }
    Gemm(rows, dvp, cols, s, kTileCols, 1, vp + c0 * dvp, dvp, acc, dvp, true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.f ? 1.0f / l[r] : 0.f;
    for (int64_t j = 0; j < sh.dv; ++j) out[(r0 + r) * sh.dv + j] = acc[r * dvp + j] * inv;
    lse[r0 + r] = m[r] + __builtin_logf(l[r]);
  }
}

// P = exp(scale * s - lse) over the first n of colsp entries, 0 after.
inline void ProbRow(float* s, int64_t n, int64_t colsp, float scale, float lse) {
  for (int64_t c = 0; c < colsp; c += kW) {
    StoreV(s + c, LanesBelow(n - c) ? ExpV(LoadV(s + c) * scale - lse) : Vec{});
  }
}

// dS = scale * P * (dP - dsum), in place over dP.
inline void DsRow(const float* prob, float* dp, int64_t colsp, float scale, float dsum) {
  for (int64_t c = 0; c < colsp; c += kW) StoreV(dp + c, LoadV(prob + c) * (LoadV(dp + c) - dsum) * scale);
}

inline void CopyRows(const float* src, int64_t ld, float* dst, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) dst[r * cols + j] = src[r * ld + j];
  }
}

inline void Zero(float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = 0.f;
}

// The products of one (key tile, query tile) pair.
void BackwardTile(const AttentionParams& p, const BackwardHeadArgs& a, int64_t c0, int64_t cols, int64_t r0,
                  int64_t rows) {
  const AttentionShape& sh = p.shape;
  const int64_t dp = RoundUp(sh.d), dvp = RoundUp(sh.dv), colsp = RoundUp(cols);
  Gemm(rows, colsp, sh.d, a.qp + r0 * dp, dp, 1, a.kt + c0, a.ldt, a.s, kTileCols, false);
  for (int64_t r = 0; r < rows; ++r) {
    ProbRow(a.s + r * kTileCols, Visible(r0 + r, c0, cols, p.causal), colsp, p.scale, a.lse[r0 + r]);
  }
  // bf16 compute (a.sr set; the caller rounded the panels): dV's product
  // multiplies rounded probabilities, dS's formula reads them unrounded and
  // dS is rounded for its two products.
  const float* pv = a.s;
  if (a.sr != nullptr && a.dv != nullptr) {
    for (int64_t r = 0; r < rows; ++r) RoundRow(a.s + r * kTileCols, a.sr + r * kTileCols, colsp);
    pv = a.sr;
  }
  if (a.dv != nullptr) Gemm(cols, dvp, rows, pv, 1, kTileCols, a.dop + r0 * dvp, dvp, a.dva, dvp, true);
  if (a.dq == nullptr && a.dk == nullptr) return;
  Gemm(rows, colsp, sh.dv, a.dout + r0 * sh.dv, sh.dv, 1, a.vt + c0, a.ldt, a.dp, kTileCols, false);
  for (int64_t r = 0; r < rows; ++r) {
    DsRow(a.s + r * kTileCols, a.dp + r * kTileCols, colsp, p.scale, a.dsum[r0 + r]);
    if (a.sr != nullptr) RoundRow(a.dp + r * kTileCols, a.dp + r * kTileCols, colsp);
  }
  if (a.dq != nullptr) Gemm(rows, dp, cols, a.dp, kTileCols, 1, a.kp + c0 * dp, dp, a.dqa + r0 * dp, dp, true);
  if (a.dk != nullptr) Gemm(cols, dp, rows, a.dp, 1, kTileCols, a.qp + r0 * dp, dp, a.dka, dp, true);
}

// One head's backward (BackwardHeadArgs: panels kt, vt, kp, qp, dop; the
// head's dout [sq, dv], lse and dsum = rowsum(dOut * Out) [sq]; scratch s
// and dp [kTileRows, kTileCols], dqa [sq, dp], dka [kTileCols, dp], dva
// [kTileCols, dvp]); writes the head's dq, dk, dv (null ones skipped).
// Key tiles outside, query tiles inside: one key tile's dK and dV stay hot
// while the queries pass (FlashAttention-2's order); dQ accumulates over
// the key tiles in dqa.
// A gradient whose rows need no padding (d a multiple of kW) accumulates
// straight into the output instead of a scratch copy.
void BackwardHead(const AttentionParams& p, const BackwardHeadArgs& args) {
  const AttentionShape& sh = p.shape;
  const int64_t dp = RoundUp(sh.d), dvp = RoundUp(sh.dv);
  const bool direct_qk = dp == sh.d, direct_v = dvp == sh.dv;
  BackwardHeadArgs a = args;
  if (direct_qk && a.dq != nullptr) a.dqa = a.dq;
  if (a.dq != nullptr) Zero(a.dqa, sh.sq * dp);
  for (int64_t c0 = 0; c0 < sh.sk; c0 += kTileCols) {
    const int64_t cols = Min(kTileCols, sh.sk - c0);
    if (direct_qk && a.dk != nullptr) a.dka = a.dk + c0 * sh.d;
    if (direct_v && a.dv != nullptr) a.dva = a.dv + c0 * sh.dv;
    Zero(a.dka, cols * dp);
    Zero(a.dva, cols * dvp);
    // Causal: queries before c0 see none of these keys.
    for (int64_t r0 = p.causal ? c0 : 0; r0 < sh.sq; r0 += kTileRows) {
      BackwardTile(p, a, c0, cols, r0, Min(kTileRows, sh.sq - r0));
    }
    if (!direct_qk && a.dk != nullptr) CopyRows(a.dka, dp, a.dk + c0 * sh.d, cols, sh.d);
    if (!direct_v && a.dv != nullptr) CopyRows(a.dva, dvp, a.dv + c0 * sh.dv, cols, sh.dv);
  }
  if (!direct_qk && a.dq != nullptr) CopyRows(a.dqa, dp, a.dq, sh.sq, sh.d);
}
