// The vector math the elementwise generator expands inline (exp, sigmoid,
// tanh, erf, erfc, log) and the selects, on AVX-512 and AVX2.
//
// Math (float32, measured against double on dense sweeps of [-110,110] and
// random magnitudes 1e-40..1e2, see ew_codegen_test; both ISAs give the same bits):
//  exp: clamp x to [-104, 89] (exp underflows to 0 / overflows to inf beyond;
//       NaN kept), n = rint(x log2e), Cody-Waite r = x - n*C1 - n*C2 with
//       C1 = 0.693359375 (exact in 9 bits) and C2 = ln2 - C1, |r| <= 0.347;
//       e^r by a degree-6 Chebyshev fit (abs error 1.95e-9 on [-ln2/2, ln2/2]);
//       scaled by 2^(n>>1) * 2^(n - n>>1) built in the exponent bits, so results
//       down to the subnormals and up to overflow round once.
//       Measured: <= 1.05 ulp.
//  tanh: |x| < 0.625: x + x^3 P(x^2), P a degree-5 Chebyshev fit of
//       (tanh(t)-t)/t^3 in t^2 (abs error 1.6e-9); otherwise 1 - 2/(e^{2|x|}+1)
//       (saturates to 1 for |x| > 9.01 and for inf); sign copied from x.
//       Measured: <= 1.32 ulp, abs <= 7.9e-8.
//  sigmoid: 1 / (1 + e^{-x}); e^{-x} = inf for x < -89 gives 0, tiny values
//       keep their absolute accuracy. Measured: abs <= 8.9e-8, <= 2.2 ulp.
//  erf/erfc: |x| < 0.75: erf = x P(x^2), P a degree-5 Chebyshev fit of
//       erf(t)/t in t^2 (abs error 1.5e-9); otherwise erfc(|x|) =
//       e^{-x^2} R(2/(2+|x|)) with R a degree-9 Chebyshev fit of
//       erfc(x) e^{x^2} in t = 2/(2+x) for x in [0.75, 10.5] (relative error
//       5e-9), |x| clamped to 10.5 (erfc underflows before), and e^{-x^2}
//       corrected for the rounding of x^2 (e^{-hi-lo} ~ e^{-hi}(1-lo));
//       erf = sign(x)(1 - erfc(|x|)), erfc(x<0) = 2 - erfc(|x|).
//       Measured: erf <= 2.4 ulp, abs <= 1.04e-7; erfc abs <= 1.58e-7
//       (4.3 ulp near |x| = 0.6, where erfc ~ 0.4 carries 1 - erf's rounding).
//  log: x = 2^k m with m in [sqrt(1/2), sqrt(2)) by integer arithmetic on the
//       bits (subnormals scaled by 2^23 first, k lowered by 23), f = m - 1
//       (exact), log(1+f) = f + f^2 (f g(f) - 1/2) with g a degree-8
//       Chebyshev fit of (log(1+f) - f + f^2/2)/f^3 on [sqrt(1/2)-1,
//       sqrt(2)-1] (abs error 2.9e-8, 3.1e-8 with the coefficients rounded to
//       float: below 3.4e-9 relative to log(1+f)); plus k ln2 with ln2 split
//       as for exp, so that the result rounds once. NaN and +inf give
//       themselves, +-0 gives -inf, x < 0 (-inf too) NaN. log(1) = 0 exactly,
//       and near 1 the error stays relative (f is exact).
//       Measured: <= 0.90 ulp everywhere (abs <= 3.8e-6, at |log x| ~ 88).
// (Figures from the test sweeps of 2.8M points, ew_codegen_test and, for log,
// ew_codegen_log_test (dense near 1, every binade, subnormals): every error
// is at most 0.33 of the contract 2e-7 + 4 ulp of the double result.)
// The fits are Chebyshev interpolants (near-minimax) computed at 40 digits
// with mpmath.chebyfit over the stated intervals, rounded to float.
#include <cmath>
#include <cstring>
#include <limits>

#include "compiler/codegen/ew_generator.h"

namespace kiln::jit {
namespace ew_x86 {
namespace {

// Fitted coefficients, highest degree first (see the header comment).
constexpr float kExpPoly[] = {0.0013941108433972674f, 0.008375126398153335f, 0.04166635289677516f,
                              0.16666415514653277f,   0.5000000047117757f,   1.000000037716214f,
                              1.0f};
constexpr float kTanhPoly[] = {0.002292744816178142f, -0.008343945515839153f, 0.02176891865102821f,
                               -0.053959259577204544f, 0.1333330355691574f,   -0.3333333317214036f};
constexpr float kErfPoly[] = {-0.0006756479568680047f, 0.005115332112532226f, -0.026835114568609705f,
                              0.11283386538414544f,    -0.37612619469437675f, 1.1283791655787516f};
constexpr float kErfcPoly[] = {-0.07725671357486187f, 0.36289463470950356f,  -0.6315819581926175f,
                               0.4270148201158337f,   -0.12098381366407872f, 0.24059128202483931f,
                               0.23348723205283425f,  0.2838560420528134f,   0.2819611726234992f,
                               4.4269131809241094e-06f};
constexpr float kLogPoly[] = {0.06971611827611923f,  -0.11479733884334564f, 0.11685419827699661f,
                              -0.12425687164068222f, 0.14249058067798615f,  -0.1666780263185501f,
                              0.20000715553760529f,  -0.2499999701976776f,  0.3333333134651184f};
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpLo = -104.0f;
constexpr float kExpHi = 89.0f;
constexpr float kTanhSmall = 0.625f;
constexpr float kErfSmall = 0.75f;
constexpr float kErfcClamp = 10.5f;
constexpr uint32_t kSqrtHalfBits = 0x3f3504f3u;  // sqrt(1/2) rounded down
constexpr uint32_t kMantissaMask = 0x007fffffu;
constexpr uint32_t kMinusInfBits = 0xff800000u;
constexpr uint32_t kQuietNaNBits = 0x7fc00000u;
constexpr float kMinNormal = 1.17549435e-38f;  // FLT_MIN
constexpr float kTwo23 = 8388608.0f;

}  // namespace

// x86's maxps/minps return their second source when either source is NaN.
// With a constant first, that is the other operand (NaN included); else the
// result takes `a` where `a` is NaN.
template <typename Vmm>
void EwGenerator<Vmm>::MaxMin(EwOp op, const Vmm& d, const Vmm& a, const Vmm& b, bool a_const, bool b_const) {
  auto emit = [&](const Vmm& dst, const Vmm& x, const Vmm& y) {
    if (op == EwOp::kMax) {
      vmaxps(dst, x, y);
    } else {
      vminps(dst, x, y);
    }
  };
  if (a_const) return emit(d, a, b);
  if (b_const) return emit(d, b, a);
  emit(T(0), a, b);
  if constexpr (kAvx512) {
    vcmpps(k2, a, a, kCmpUnordQ);
    vblendmps(d | k2, T(0), a);
  } else {
    vcmpps(T(1), a, a, kCmpUnordQ);
    vblendvps(d, T(0), a, T(1));
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::Exp(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t2 = T(2);
  // Operand order keeps NaN: maxps/minps return the second source on NaN.
  vmovups(t0, C(kExpLo));
  vmaxps(t0, t0, x);
  vmovups(t1, C(kExpHi));
  vminps(t0, t1, t0);
  vmulps(t1, t0, C(kLog2e));
  vcvtps2dq(t1, t1);  // n, round to nearest
  vcvtdq2ps(t2, t1);
  vfnmadd231ps(t0, t2, C(kLn2Hi));  // r = x - n*C1 (exact) - n*C2
  vfnmadd231ps(t0, t2, C(kLn2Lo));
  Horner(t2, t0, kExpPoly, 7);
  // 2^n = 2^(n>>1) * 2^(n-(n>>1)): both halves are normal floats for n in
  // [-150, 128], so overflow and gradual underflow happen in the last multiply.
  vpsrad(t0, t1, 1);
  vpsubd(t1, t1, t0);
  vpaddd(t0, t0, CI(127));
  vpslld(t0, t0, 23);
  vpaddd(t1, t1, CI(127));
  vpslld(t1, t1, 23);
  vmulps(d, t2, t0);
  vmulps(d, d, t1);
}

template <typename Vmm>
void EwGenerator<Vmm>::Log(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t2 = T(2), t3 = T(3), t4 = T(4);
  // Subnormals (and, harmlessly, x <= 0) are scaled into the normal range;
  // the condition stays in k2 / t1 until k is adjusted.
  vmulps(t0, x, C(kTwo23));
  CmpLt(x, C(kMinNormal), t1);
  Select(t0, t1, t0, x);
  // bits - bits(sqrt(1/2)): the exponent field is k, the rest rebuilt
  // around sqrt(1/2) is m in [sqrt(1/2), sqrt(2)).
  vpsubd(t2, t0, CI(kSqrtHalfBits));
  vpsrad(t3, t2, 23);
  And(t2, t2, CI(kMantissaMask));
  vpaddd(t2, t2, CI(kSqrtHalfBits));
  vsubps(t2, t2, C(1.0f));  // f, exact
  vcvtdq2ps(t3, t3);
  if constexpr (kAvx512) {
    vsubps(t3 | k2, t3, C(23.0f));
  } else {
    vandps(t1, t1, C(23.0f));
    vsubps(t3, t3, t1);
  }
  // f + f^2 (f g(f) - 1/2) + k ln2, ln2 = hi + lo, k*hi exact.
  Horner(t1, t2, kLogPoly, 9);
  vfmadd213ps(t1, t2, C(-0.5f));
  vmulps(t4, t2, t2);
  vfmadd213ps(t1, t4, t2);
  vfmadd231ps(t1, t3, C(kLn2Lo));
  vfmadd231ps(t1, t3, C(kLn2Hi));
  // Special values, last to first in priority: NaN and +inf give x.
  CmpLt(x, C(std::numeric_limits<float>::infinity()), t0);
  Select(t1, t0, t1, x);
  if constexpr (kAvx512) {
    vcmpps(k2, x, CI(0), kCmpEqOq);
    vmovups(t1 | k2, CI(kMinusInfBits));
    vcmpps(k2, x, CI(0), kCmpLtOq);
    vmovups(t1 | k2, CI(kQuietNaNBits));
  } else {
    vcmpps(t0, x, CI(0), kCmpEqOq);
    vblendvps(t1, t1, CI(kMinusInfBits), t0);
    vcmpps(t0, x, CI(0), kCmpLtOq);
    vblendvps(t1, t1, CI(kQuietNaNBits), t0);
  }
  vmovaps(d, t1);
}

template <typename Vmm>
void EwGenerator<Vmm>::SelectNonZero(const Vmm& d, const Vmm& c, const Vmm& a, const Vmm& b) {
  // Unordered not-equal: a NaN c compares unequal to 0 and picks a.
  if constexpr (kAvx512) {
    vcmpps(k2, c, CI(0), kCmpNeqUq);
    vblendmps(d | k2, b, a);
  } else {
    vcmpps(T(0), c, CI(0), kCmpNeqUq);
    vblendvps(d, b, a, T(0));
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::SelectGtZero(const Vmm& d, const Vmm& a, const Vmm& b) {
  if constexpr (kAvx512) {
    vcmpps(k2, a, CI(0), kCmpGtOq);
    vmovaps(d | k2 | T_z, b);
  } else {
    vcmpps(T(0), a, CI(0), kCmpGtOq);
    vandps(d, T(0), b);
  }
}

template <typename Vmm>
void EwGenerator<Vmm>::Sigmoid(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t3 = T(3);
  Xor(t3, x, CI(kSignBit));
  Exp(t3, t3);
  vaddps(t3, t3, C(1.0f));
  vmovups(t0, C(1.0f));
  vdivps(d, t0, t3);
}

template <typename Vmm>
void EwGenerator<Vmm>::Tanh(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t2 = T(2), t3 = T(3), t4 = T(4);
  And(t4, x, CI(kAbsMask));
  // Large |x|: 1 - 2 / (e^{2|x|} + 1).
  vaddps(t3, t4, t4);
  Exp(t3, t3);
  vaddps(t3, t3, C(1.0f));
  vmovups(t0, C(2.0f));
  vdivps(t3, t0, t3);
  vmovups(t0, C(1.0f));
  vsubps(t3, t0, t3);
  // Small |x|: |x| + |x|^3 P(x^2).
  vmulps(t0, t4, t4);
  Horner(t1, t0, kTanhPoly, 6);
  vmulps(t2, t4, t0);
  vfmadd213ps(t1, t2, t4);
  CmpLt(t4, C(kTanhSmall), t0);
  Select(t3, t0, t1, t3);
  And(t0, x, CI(kSignBit));
  Or(d, t3, t0);
}

template <typename Vmm>
void EwGenerator<Vmm>::ErfcTail() {
  const Vmm t0 = T(0), t1 = T(1), t3 = T(3), t4 = T(4), t5 = T(5);
  vmovups(t4, C(kErfcClamp));
  vminps(t4, t4, t5);  // NaN in t5 is kept
  vaddps(t0, t4, C(2.0f));
  vmovups(t1, C(2.0f));
  vdivps(t0, t1, t0);  // t = 2 / (2 + a)
  Horner(t3, t0, kErfcPoly, 10);
  // e^{-a^2} with a^2 = hi + lo exactly: e^{-hi} (1 - lo).
  vmulps(t0, t4, t4);
  vfmsub213ps(t4, t4, t0);
  vfnmadd231ps(t3, t3, t4);
  Xor(t4, t0, CI(kSignBit));
  Exp(t4, t4);
  vmulps(t4, t4, t3);
}

template <typename Vmm>
void EwGenerator<Vmm>::Erf(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t3 = T(3), t4 = T(4), t5 = T(5);
  And(t5, x, CI(kAbsMask));
  ErfcTail();
  vmovups(t3, C(1.0f));
  vsubps(t4, t3, t4);
  And(t3, x, CI(kSignBit));
  Or(t4, t4, t3);
  vmulps(t0, x, x);
  Horner(t1, t0, kErfPoly, 6);
  vmulps(t1, t1, x);
  CmpLt(t5, C(kErfSmall), t0);
  Select(d, t0, t1, t4);
}

template <typename Vmm>
void EwGenerator<Vmm>::Erfc(const Vmm& d, const Vmm& x) {
  const Vmm t0 = T(0), t1 = T(1), t2 = T(2), t3 = T(3), t4 = T(4), t5 = T(5);
  And(t5, x, CI(kAbsMask));
  ErfcTail();
  vmovups(t3, C(2.0f));
  vsubps(t3, t3, t4);
  CmpLt(x, CI(0), t0);
  Select(t4, t0, t3, t4);
  vmulps(t0, x, x);
  Horner(t1, t0, kErfPoly, 6);
  vmulps(t1, t1, x);
  vmovups(t2, C(1.0f));
  vsubps(t1, t2, t1);
  CmpLt(t5, C(kErfSmall), t0);
  Select(d, t0, t1, t4);
}


template <typename Vmm>
void EwGenerator<Vmm>::Fma(const Vmm& d, const Vmm& a, const Vmm& b, const Vmm& c) {
  if (d.getIdx() == a.getIdx()) {
    vfmadd213ps(d, b, c);
  } else if (d.getIdx() == b.getIdx()) {
    vfmadd213ps(d, a, c);
  } else if (d.getIdx() == c.getIdx()) {
    vfmadd231ps(d, a, b);
  } else {
    vmovaps(d, a);
    vfmadd213ps(d, b, c);
  }
}

#define KILN_EW_MATH_INSTANTIATE(Vmm)                                   \
  template void EwGenerator<Vmm>::Exp(const Vmm&, const Vmm&);          \
  template void EwGenerator<Vmm>::Log(const Vmm&, const Vmm&);          \
  template void EwGenerator<Vmm>::SelectNonZero(const Vmm&, const Vmm&, const Vmm&, const Vmm&); \
  template void EwGenerator<Vmm>::SelectGtZero(const Vmm&, const Vmm&, const Vmm&); \
  template void EwGenerator<Vmm>::Sigmoid(const Vmm&, const Vmm&);      \
  template void EwGenerator<Vmm>::Tanh(const Vmm&, const Vmm&);         \
  template void EwGenerator<Vmm>::ErfcTail();                           \
  template void EwGenerator<Vmm>::Erf(const Vmm&, const Vmm&);          \
  template void EwGenerator<Vmm>::Erfc(const Vmm&, const Vmm&);         \
  template void EwGenerator<Vmm>::MaxMin(EwOp, const Vmm&, const Vmm&, const Vmm&, bool, bool); \
  template void EwGenerator<Vmm>::Fma(const Vmm&, const Vmm&, const Vmm&, const Vmm&);
KILN_EW_MATH_INSTANTIATE(Xbyak::Zmm)
KILN_EW_MATH_INSTANTIATE(Xbyak::Ymm)
#undef KILN_EW_MATH_INSTANTIATE

}  // namespace ew_x86
}  // namespace kiln::jit
