// Internal to the fused attention kernels (attention_kernels.cc, the f32
// tile loops of attention_tiles_impl.h and the bf16 ones of
// attention_bf16.cc and attention_amx.cc): the tile sizes and each head's
// packed operands.
#pragma once

#include <cstdint>

#include "compiler/kernels/attention/attention_kernels.h"

namespace kiln::jit {

constexpr int64_t kTileRows = 64;   // queries per tile
constexpr int64_t kTileCols = 128;  // keys per tile: a multiple of every ISA's vector width

// One head's f32 backward: its packed panels, its slices of the inputs and
// outputs, and per-thread scratch (see attention_tiles_impl.h). `sr` is
// set under bf16 compute on CPUs without AVX512_BF16: the probabilities
// rounded to bf16 for dV's product, while dS reads them unrounded.
struct BackwardHeadArgs {
  const float *kt, *vt, *kp, *qp, *dop, *dout, *lse, *dsum;
  int64_t ldt;  // row stride of kt and vt
  float *s, *dp, *dqa, *dka, *dva, *sr;
  float *dq, *dk, *dv;
};

// Row stride of the transposed panels: sk rounded up to the vector width
// plus one vector, so that the rows of a transposed panel do not all fall
// into the same L1 sets when sk is a multiple of 1024.
inline int64_t TransposedLd(int64_t sk, int64_t w) { return (sk + w - 1) / w * w + w; }

// bf16 pairs: two bf16 in a uint32 (attention_bf16_pack.h). n elements make
// Pairs(n) pairs.
inline int64_t Pairs(int64_t n) { return (n + 1) / 2; }

// The bf16 tile loops, for CPUs with AVX512F, AVX512BW and AVX512_BF16
// (attention_bf16.cc; HasAvx512Bf16() before any call). Operands are packed
// as pairs: two bf16 in a uint32, the low half the even element along the
// contraction, which is what vdpbf16ps multiplies and adds in f32. Each
// product's A operand is pairs along the contraction in any layout (it is
// broadcast one pair at a time); its B operand is "VNNI": row i of pairs
// holds elements 2i and 2i+1 of every column, padded to whole vectors.
namespace avx512bf16 {

constexpr int64_t kW = 16;  // floats per vector

inline int64_t Padded(int64_t n) { return (n + kW - 1) / kW * kW; }

// Per-head panels of the forward: kt = K^T [Pairs(d), ldt] (VNNI), vp = V
// [Pairs(sk), Padded(dv)] (VNNI). `ldt` is TransposedLd(sk, kW).
void PackForwardHead(const AttentionShape& sh, const float* k, const float* v, uint32_t* kt, uint32_t* vp);

// Scratch of one forward task, in uint32 and in floats.
inline int64_t ForwardPairScratch(const AttentionShape& sh) {
  return kTileRows * Padded(sh.d) / 2 + kTileRows * kTileCols / 2;
}
inline int64_t ForwardFloatScratch(const AttentionShape& sh) {
  return kTileRows * kTileCols + kTileRows * Padded(sh.dv) + 2 * kTileRows;
}

// Rows [r0, r0 + rows) of one head's forward from the head's q [sq, d] and
// its panels: out [sq, dv], lse [sq] (the head's).
void ForwardRows(const AttentionParams& p, const float* q, const uint32_t* kt, const uint32_t* vp, float* out,
                 float* lse, int64_t r0, int64_t rows, uint32_t* pair_scratch, float* float_scratch);

// Scratch of one head's backward, in uint32 and in floats.
inline int64_t BackwardPairScratch(const AttentionShape& sh) {
  const int64_t ldt = TransposedLd(sh.sk, kW);
  return sh.sq * (Padded(sh.d) + Padded(sh.dv)) / 2 + (Pairs(sh.d) + Pairs(sh.dv)) * ldt +
         Pairs(sh.sq) * (Padded(sh.dv) + Padded(sh.d)) + Pairs(sh.sk) * Padded(sh.d) + 3 * kTileRows * kTileCols / 2;
}
inline int64_t BackwardFloatScratch(const AttentionShape& sh) {
  return sh.sq + 2 * kTileRows * kTileCols + sh.sq * Padded(sh.d) + kTileCols * (Padded(sh.d) + Padded(sh.dv));
}

// One head's backward: q, k, v, out, dout, lse of the head; dq, dk, dv the
// head's (null: not wanted), each overwritten.
struct HeadArgs {
  const float *q, *k, *v, *out, *dout, *lse;
  float *dq, *dk, *dv;
};
void BackwardHead(const AttentionParams& p, const HeadArgs& a, uint32_t* pair_scratch, float* float_scratch);

}  // namespace avx512bf16

// The AMX tile loops (attention_amx.cc; AmxUsable() before any call): every
// product is tdpbf16ps on 16x16 f32 tiles of C, 16 rows x 16 pairs of A and
// 16 pair rows x 16 columns of B, so each operand is packed zero-padded to
// whole tiles. dV and dK accumulate transposed (dV^T = dOut^T P, dK^T = Q^T
// dS: their A operands are packed once per head, their B operands are the
// tile's probabilities and dS as pair rows) and are transposed back per key
// tile.
namespace amx {

inline int64_t Tiles16(int64_t n) { return (n + 15) / 16 * 16; }

// Per-head forward panels: kt = K^T [Tiles16(Pairs(d)), ldt] (VNNI), vp = V
// [Tiles16(Pairs(sk)), Tiles16(dv)] (VNNI); ldt is TransposedLd(sk, 16).
inline int64_t ForwardPanelPairs(const AttentionShape& sh) {
  return Tiles16(Pairs(sh.d)) * TransposedLd(sh.sk, 16) + Tiles16(Pairs(sh.sk)) * Tiles16(sh.dv);
}
void PackForwardHead(const AttentionShape& sh, const float* k, const float* v, uint32_t* panels);

// Scratch of one forward task, in uint32 and in floats.
inline int64_t ForwardPairScratch(const AttentionShape& sh) {
  return kTileRows * Tiles16(Pairs(sh.d)) + kTileRows * kTileCols / 2;
}
inline int64_t ForwardFloatScratch(const AttentionShape& sh) {
  return kTileRows * kTileCols + kTileRows * Tiles16(sh.dv) + 2 * kTileRows;
}

// Loads the tile configuration of these loops on the calling thread (once
// per parallel region: other AMX code, such as oneDNN's, configures its own)
// and releases it.
void ConfigureTiles();
void ReleaseTiles();

// As avx512bf16::ForwardRows, on the panels of PackForwardHead.
void ForwardRows(const AttentionParams& p, const float* q, const uint32_t* panels, float* out, float* lse,
                 int64_t r0, int64_t rows, uint32_t* pair_scratch, float* float_scratch);

// Scratch of one head's backward, in uint32 and in floats.
int64_t BackwardPairScratch(const AttentionShape& sh);
int64_t BackwardFloatScratch(const AttentionShape& sh);

// As avx512bf16::BackwardHead.
void BackwardHead(const AttentionParams& p, const avx512bf16::HeadArgs& a, uint32_t* pair_scratch,
                  float* float_scratch);

}  // namespace amx
}  // namespace kiln::jit
