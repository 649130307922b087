// erf, floor, ceil, round, sign, reciprocal, softsign and their grads:
// unary_op functors (framework/ops/unary_op.h), all elementwise for the JIT.
// floor, ceil, round and sign are piecewise constant: their grads are zeros.
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/ops.h"
#include "framework/ops/unary_op.h"

namespace kiln {
namespace {

constexpr double kTwoOverSqrtPi = 1.1283791670955126;  // 2 / sqrt(pi)

struct Erf {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Erf(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::erf(x);
  }
  template <typename T>
  T Grad(T x, T dout) const {
    return T(kTwoOverSqrtPi) * std::exp(-(x * x)) * dout;
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Erf(x); }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    return p.Mul(p.Mul(p.Const(static_cast<float>(kTwoOverSqrtPi)), p.Exp(p.Neg(p.Mul(x, x)))), g);
  }
};

// The IR has no rounding instruction; rounding comes from the f32 add itself.
// For 0 < a < 2^23, a + 2^23 lies in [2^23, 2^24), where the floats are the
// integers, so the add rounds a half to even (the default MXCSR mode) and
// subtracting 2^23 again is exact. Floats from 2^23 on are integers already,
// and 0, NaN and inf are their own rounding: those pass through, which also
// keeps the sign of a zero. The sign of the rest is put back with a select,
// so -0.3 rounds to -0 as nearbyint does. Relies on f32 lanes (generated
// code, RunReferenceFloat): the double oracle would not round.
EwValue EwRoundHalfEven(EwProgram& p, EwValue x) {
  const EwValue two23 = p.Const(8388608.0f);
  const EwValue a = p.Abs(x);
  const EwValue r = p.Sub(p.Add(a, two23), two23);
  const EwValue signed_r = p.Select(p.Lt(x, p.Const(0.0f)), p.Neg(r), r);
  const EwValue rounds = p.Mul(p.Lt(a, two23), p.Gt(a, p.Const(0.0f)));
  return p.Select(rounds, signed_r, x);
}

// floor(x) = r - 1 where the rounding r went up, else r (exact: r and r - 1
// are integers below 2^24). -0 stays -0 (-0 - 0), NaN stays NaN.
EwValue EwFloor(EwProgram& p, EwValue x) {
  const EwValue r = EwRoundHalfEven(p, x);
  return p.Sub(r, p.Gt(r, x));
}

// Zero grads of the piecewise constant ops: Out@GRAD gives the dims only.
struct ZeroGrad {
  static constexpr const char* kGradReads = nullptr;
  template <typename T>
  T Grad(T, T) const {
    return T(0);
  }
  EwValue EwGrad(EwProgram& p, EwValue, EwValue) const { return p.Const(0.0f); }
};

struct Floor : ZeroGrad {
  template <typename Ctx>
  explicit Floor(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::floor(x);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return EwFloor(p, x); }
};

// ceil(x) = -floor(-x): keeps the sign of zeros as std::ceil (ceil(-0.3) = -0).
struct Ceil : ZeroGrad {
  template <typename Ctx>
  explicit Ceil(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::ceil(x);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Neg(EwFloor(p, p.Neg(x))); }
};

// nearbyint in the default rounding mode: halves go to the even neighbour
// (ONNX Round, numpy.round).
struct Round : ZeroGrad {
  template <typename Ctx>
  explicit Round(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::nearbyint(x);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return EwRoundHalfEven(p, x); }
};

// 1 for x > 0, -1 for x < 0, x itself otherwise (0, -0, NaN), also for integers.
struct Sign : ZeroGrad {
  static constexpr bool kIntegers = true;
  template <typename Ctx>
  explicit Sign(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return x > T(0) ? T(1) : x < T(0) ? T(-1) : x;
  }
  EwValue Ew(EwProgram& p, EwValue x) const {
    const EwValue zero = p.Const(0.0f);
    return p.Select(p.Gt(x, zero), p.Const(1.0f), p.Select(p.Lt(x, zero), p.Const(-1.0f), x));
  }
};

struct Reciprocal {
  static constexpr const char* kGradReads = "Out";
  template <typename Ctx>
  explicit Reciprocal(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return T(1) / x;
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return -(dout * out * out);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Div(p.Const(1.0f), x); }
  EwValue EwGrad(EwProgram& p, EwValue out, EwValue g) const { return p.Neg(p.Mul(p.Mul(g, out), out)); }
};

struct Softsign {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Softsign(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return x / (T(1) + std::fabs(x));
  }
  template <typename T>
  T Grad(T x, T dout) const {
    const T d = T(1) + std::fabs(x);
    return dout / (d * d);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Div(x, p.Add(p.Const(1.0f), p.Abs(x))); }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    const EwValue d = p.Add(p.Const(1.0f), p.Abs(x));
    return p.Div(g, p.Mul(d, d));
  }
};

}  // namespace

void RegisterUnaryMathOps(OpRegistry& r) {
  using unary_op::RegisterUnaryOp;
  const std::string zero = ": zeros (the op is piecewise constant), with Out@GRAD's dims";
  RegisterUnaryOp<Erf>(r, "erf", "Out = erf(X), the error function", {},
                       "Gradient of erf: X@GRAD = 2 / sqrt(pi) * exp(-X^2) * Out@GRAD");
  RegisterUnaryOp<Floor>(r, "floor",
                         "Out = floor(X), the largest integer not above X (NaN, inf and zeros stay as they are). JIT: "
                         "exact, rounding by adding and subtracting 2^23 in f32",
                         {}, "Gradient of floor" + zero);
  RegisterUnaryOp<Ceil>(r, "ceil", "Out = ceil(X), the smallest integer not below X (ceil(-0.5) = -0). JIT: exact", {},
                        "Gradient of ceil" + zero);
  RegisterUnaryOp<Round>(r, "round",
                         "Out = X rounded to the nearest integer, halves to the even one (as ONNX Round and "
                         "numpy.round: round(2.5) = 2, round(-0.5) = -0). JIT: exact",
                         {}, "Gradient of round" + zero);
  RegisterUnaryOp<Sign>(r, "sign",
                        "Out = 1 where X > 0, -1 where X < 0, X where X is 0 or NaN; f32, f64, i64, i32 (the grad "
                        "f32 and f64). JIT: a generated kernel for f32; other dtypes run the framework kernel",
                        {}, "Gradient of sign" + zero);
  RegisterUnaryOp<Reciprocal>(r, "reciprocal", "Out = 1 / X (inf at 0)", {},
                              "Gradient of reciprocal: X@GRAD = -Out@GRAD * Out^2");
  RegisterUnaryOp<Softsign>(r, "softsign", "Out = X / (1 + |X|)", {},
                            "Gradient of softsign: X@GRAD = Out@GRAD / (1 + |X|)^2");
}

}  // namespace kiln
