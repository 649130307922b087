// The fused attention's bf16 packing helpers, for CPUs with AVX512F, BW
// and BF16: f32 rows converted to bf16 pairs (vcvtneps2bf16, nearest even)
// in the layouts vdpbf16ps and AMX multiply. attention_bf16.cc and
// attention_amx.cc include this file inside their own namespace, under their
// target pragma; like attention_tiles_impl.h it has no includes and no std::
// templates (Pairs comes from attention_internal.h). A pair is two bf16 in a uint32, the low half the even element
// along the contraction.

// 16 floats from p, lanes n and above zero (n may be <= 0 or >= 16).
inline __m512 Load16(const float* p, int64_t n) {
  if (n >= 16) return _mm512_loadu_ps(p);
  const __mmask16 m = n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
  return _mm512_maskz_loadu_ps(m, p);
}

// dst[i] = pair(src[2i], src[2i + 1]) for i < Padded(n) / 2 (n rounded up
// to 16), src read as zero from n on.
inline void CvtRow(const float* src, int64_t n, uint32_t* dst) {
  for (int64_t c = 0; c < n; c += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c / 2), (__m256i)_mm512_cvtneps_pbh(Load16(src + c, n - c)));
  }
}

// As CvtRow for src[0, n), then zero pairs up to `pairs` (a multiple of 8,
// at least Padded(n) / 2).
inline void CvtRowPadded(const float* src, int64_t n, uint32_t* dst, int64_t pairs) {
  int64_t c = 0;
  for (; c < n; c += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c / 2), (__m256i)_mm512_cvtneps_pbh(Load16(src + c, n - c)));
  }
  for (c /= 2; c < pairs; c += 8) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), _mm256_setzero_si256());
}

// dst[j] = pair(x[j], y[j]) for j < Padded(n), x and y read as zero from n
// on (y null: all zero).
inline void InterleaveRows(const float* x, const float* y, int64_t n, uint32_t* dst) {
  // Word 2j takes word j (x's), word 2j + 1 word 16 + j (y's).
  alignas(64) static const uint16_t kIdx[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kIdx);
  for (int64_t c = 0; c < n; c += 16) {
    const __m512 a = Load16(x + c, n - c), b = y != nullptr ? Load16(y + c, n - c) : _mm512_setzero_ps();
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // words 0..15 from a, 16..31 from b
    _mm512_storeu_si512(dst + c, _mm512_permutexvar_epi16(idx, both));
  }
}

// The pairs of rows 2i, 2i + 1 of src [rows, cols] (a zero row past the
// end) into dst [Pairs(rows), ldd], ldd >= cols rounded up to 16: the VNNI
// form of src as a B operand.
inline void PackRowPairs(const float* src, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  for (int64_t i = 0; 2 * i < rows; ++i) {
    InterleaveRows(src + 2 * i * cols, 2 * i + 1 < rows ? src + (2 * i + 1) * cols : nullptr, cols, dst + i * ldd);
  }
}

// dst [Pairs(cols), ldd] with dst[i][r] = pair(src[r][2i], src[r][2i + 1])
// and columns [rows, ldd) zero: the VNNI form of src^T as a B operand.
inline void PackTransposedPairs(const float* src, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  const int64_t pairs = Pairs(cols);
  alignas(32) uint32_t tmp[8];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 16) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp),
                         (__m256i)_mm512_cvtneps_pbh(Load16(src + r * cols + c, cols - c)));
      for (int64_t t = 0; t < 8 && c / 2 + t < pairs; ++t) dst[(c / 2 + t) * ldd + r] = tmp[t];
    }
  }
  for (int64_t i = 0; i < pairs; ++i) {
    for (int64_t r = rows; r < ldd; ++r) dst[i * ldd + r] = 0;
  }
}
