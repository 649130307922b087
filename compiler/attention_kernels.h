// The JIT's fused attention kernels (fused_attention and its grad, see
// framework/ops/fused_attention_op.cc for the semantics and the reference
// kernels): scaled dot-product attention tiled with an online softmax, so
// the [Sq, Sk] probabilities of a head never exist beyond one tile.
//
// The tile products are small GEMMs run by a register-blocked micro-kernel
// written once with GCC vector extensions and compiled twice, for AVX-512
// and for AVX2+FMA (attention_tiles_impl.h); the exponentials use a
// polynomial (Cephes' expf, relative error below 2 ulp in float).
// Parallel with OpenMP: the forward over (head, query tile) pairs, the
// backward over heads (each head's dQ, dK and dV belong to one thread).
//
// Inputs are first copied, per head, into zero-padded f32 panels
// (transposed where a product needs it).
//
// f32 only, under --amp bf16 too: a bf16 variant (vdpbf16ps micro-kernels
// over bf16 pair packs; branch attention-bf16-vdpbf16ps) ran slower than
// these on an AVX512_BF16 + AMX host, where vdpbf16ps multiplies half as
// many pairs per second as f32 FMA (docs/benchmarks.md, "Issue 14's
// targets"); AMX tiles are what would make the products faster.
#pragma once

#include <cstdint>

#include "compiler/isa.h"

namespace kiln::jit {

// Q [heads, sq, d], K [heads, sk, d], V [heads, sk, dv], dense row-major.
struct AttentionShape {
  int64_t heads = 0, sq = 0, sk = 0, d = 0, dv = 0;
};

struct AttentionParams {
  AttentionShape shape;
  float scale = 1.0f;
  bool causal = false;  // query i sees keys j <= i (sq == sk)
  Isa isa = Isa::kAvx512;
};

// Out [heads, sq, dv], lse [heads, sq] (natural log of each row's sum of
// exp(scores); -inf for a row without keys, whose Out is 0).
void FusedAttentionForward(const AttentionParams& p, const float* q, const float* k, const float* v, float* out,
                           float* lse);

struct AttentionGradArgs {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *lse = nullptr, *dout = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;  // null: not wanted
};

// dQ, dK, dV (each overwritten) from Q, K, V, the forward's Out and LSE,
// and dOut.
void FusedAttentionBackward(const AttentionParams& p, const AttentionGradArgs& a);

}  // namespace kiln::jit
