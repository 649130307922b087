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
// f32, or bf16 compute: Q, K, V, dOut, the probabilities that multiply V or
// dOut and dS are rounded to bf16 (nearest even) and every product
// accumulates in f32; the softmax, its running statistics, the row sums and
// dS's formula stay f32, as FlashAttention accumulates 16-bit inputs. The
// bf16 products run on AMX tiles (tdpbf16ps, attention_amx.cc) where the CPU
// has them, else on vdpbf16ps micro-kernels (attention_bf16.cc) with
// AVX512_BF16, else as the f32 tile loops on operands rounded by an exact
// integer sequence (Bf16Products). Only AMX makes the bf16 kernels faster
// than the f32 ones (vdpbf16ps multiplies half as many pairs per second as
// f32 FMA on an AMX host), so --amp bf16 lowers attention to bf16 only
// there (Bf16AttentionPays).
#pragma once

#include <cstdint>

#include "compiler/codegen/isa.h"
#include "framework/data_type.h"

namespace kiln::jit {

// Q [heads, sq, d], K [heads, sk, d], V [heads, sk, dv], dense row-major.
struct AttentionShape {
  int64_t heads = 0, sq = 0, sk = 0, d = 0, dv = 0;
};

// How bf16 compute runs its products: kAuto is the fastest this CPU has.
enum class Bf16Products : uint8_t { kAuto, kAmx, kVdpbf16ps, kRoundedF32 };
const char* Bf16ProductsName(Bf16Products p);  // "amx (tdpbf16ps)", ...
// Whether the CPU runs `p` (kAuto: always).
bool Bf16ProductsSupported(Bf16Products p);
// kAuto resolved for `isa` (kVdpbf16ps and kAmx need kAvx512).
Bf16Products ResolveBf16Products(Bf16Products p, Isa isa);
// True where bf16 attention beats the f32 kernels: AMX (AmxUsable()).
bool Bf16AttentionPays(Isa isa);

struct AttentionParams {
  AttentionShape shape;
  float scale = 1.0f;
  bool causal = false;  // query i sees keys j <= i (sq == sk)
  Isa isa = Isa::kAvx512;
  ComputeType compute = ComputeType::kF32;
  Bf16Products bf16_products = Bf16Products::kAuto;  // under kBF16 compute
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
