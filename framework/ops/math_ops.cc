// log, sqrt, rsqrt, abs, pow, leaky_relu, softplus and their grads: unary_op
// functors (framework/ops/unary_op.h), elementwise for the JIT. The grads of
// sqrt and rsqrt read Out, the others X.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/ops.h"
#include "framework/ops/unary_op.h"

namespace kiln {
namespace {

struct Log {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Log(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::log(x);
  }
  template <typename T>
  T Grad(T x, T dout) const {
    return dout / x;
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Log(x); }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const { return p.Div(g, x); }
};

struct Sqrt {
  static constexpr const char* kGradReads = "Out";
  template <typename Ctx>
  explicit Sqrt(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::sqrt(x);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return T(0.5) * dout / out;
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Sqrt(x); }
  EwValue EwGrad(EwProgram& p, EwValue out, EwValue g) const { return p.Div(p.Mul(p.Const(0.5f), g), out); }
};

struct Rsqrt {
  static constexpr const char* kGradReads = "Out";
  template <typename Ctx>
  explicit Rsqrt(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return T(1) / std::sqrt(x);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return T(-0.5) * dout * out * out * out;
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Div(p.Const(1.0f), p.Sqrt(x)); }
  EwValue EwGrad(EwProgram& p, EwValue out, EwValue g) const {
    return p.Mul(p.Mul(p.Mul(p.Mul(p.Const(-0.5f), g), out), out), out);
  }
};

// The grad is 0 at X = 0 (torch's sign(0)) and where X is NaN (no sign).
struct Abs {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Abs(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::fabs(x);
  }
  template <typename T>
  T Grad(T x, T dout) const {
    return x > T(0) ? dout : x < T(0) ? -dout : T(0);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Abs(x); }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    return p.Sub(p.SelectGtZero(x, g), p.SelectGtZero(p.Neg(x), g));
  }
};

// x^e with torch.pow's cases; e is classified in double so that the f32 and
// f64 kernels and the JIT agree on which case applies.
bool IsInteger(double e) { return std::isfinite(e) && e == std::floor(e); }
// Integers up to this magnitude are raised by repeated squaring; larger ones
// are even, so x^e = |x|^e = exp(e ln|x|) there.
constexpr double kSquaringLimit = 16777216.0;  // 2^24

template <typename T>
T PowRef(T x, double e) {
  if (e == 0.5) return std::sqrt(x);
  if (e == -0.5) return T(1) / std::sqrt(x);
  if (!IsInteger(e) && x < T(0)) return std::numeric_limits<T>::quiet_NaN();
  return static_cast<T>(std::pow(static_cast<double>(x), e));  // exact cases: IEEE pow's
}

// x^n for an integer n, 0 < n <= kSquaringLimit: square-and-multiply over n's
// bits, so a negative x keeps its sign for odd n.
EwValue EwPowUnsigned(EwProgram& p, EwValue x, uint32_t n) {
  EwValue result = -1;
  EwValue square = x;
  for (;;) {
    if (n & 1u) result = result < 0 ? square : p.Mul(result, square);
    n >>= 1;
    if (n == 0) return result;
    square = p.Mul(square, square);
  }
}

EwValue EwPow(EwProgram& p, EwValue x, double e) {
  if (e == 0) return p.Const(1.0f);  // also for NaN x, as pow(NaN, 0)
  if (e == 0.5) return p.Sqrt(x);
  if (e == -0.5) return p.Div(p.Const(1.0f), p.Sqrt(x));
  if (!IsInteger(e)) return p.Exp(p.Mul(p.Const(static_cast<float>(e)), p.Log(x)));  // NaN for x < 0
  const double n = std::fabs(e);
  const EwValue magnitude = n <= kSquaringLimit ? EwPowUnsigned(p, x, static_cast<uint32_t>(n))
                                                : p.Exp(p.Mul(p.Const(static_cast<float>(n)), p.Log(p.Abs(x))));
  return e > 0 ? magnitude : p.Div(p.Const(1.0f), magnitude);
}

struct Pow {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Pow(const Ctx& ctx) : factor(ctx.template Attr<float>("factor")) {}
  // exp(factor ln X) would differ from pow at X = 1 and X < 0 for an
  // infinite or NaN factor; no model needs one.
  static void CheckAttrs(const InferShapeContext& ctx) {
    const float factor = ctx.Attr<float>("factor");
    if (!std::isfinite(factor)) ctx.Fail("attribute factor: expected a finite value, got ", factor);
  }
  template <typename T>
  T Fwd(T x) const {
    return PowRef(x, factor);
  }
  // torch's pow_backward: zeros for factor 0 (not 0 * x^-1, NaN at x = 0).
  template <typename T>
  T Grad(T x, T dout) const {
    if (factor == 0.0f) return T(0);
    return T(factor) * PowRef(x, static_cast<double>(factor) - 1.0) * dout;
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return EwPow(p, x, factor); }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    if (factor == 0.0f) return p.Const(0.0f);
    return p.Mul(p.Mul(p.Const(factor), EwPow(p, x, static_cast<double>(factor) - 1.0)), g);
  }
  float factor;
};

struct LeakyRelu {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit LeakyRelu(const Ctx& ctx) : alpha(ctx.template Attr<float>("alpha")) {}
  template <typename T>
  T Fwd(T x) const {
    return x > T(0) ? x : T(alpha) * x;  // NaN: alpha * NaN
  }
  template <typename T>
  T Grad(T x, T dout) const {
    return x > T(0) ? dout : T(alpha) * dout;
  }
  EwValue Ew(EwProgram& p, EwValue x) const {
    return p.Select(p.SelectGtZero(x, p.Const(1.0f)), x, p.Mul(x, p.Const(alpha)));
  }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    return p.Select(p.SelectGtZero(x, p.Const(1.0f)), g, p.Mul(g, p.Const(alpha)));
  }
  float alpha;
};

// torch.nn.functional.softplus: log(1 + e^z) / beta with z = beta x, or x
// where z > threshold. max(z, 0) + log1p(e^-|z|) never overflows and keeps
// the tiny values of large negative z.
struct Softplus {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Softplus(const Ctx& ctx)
      : beta(ctx.template Attr<float>("beta")), threshold(ctx.template Attr<float>("threshold")) {}
  static void CheckAttrs(const InferShapeContext& ctx) {
    const float beta = ctx.Attr<float>("beta");
    if (beta == 0.0f || !std::isfinite(beta)) ctx.Fail("attribute beta: expected a finite nonzero value, got ", beta);
  }
  template <typename T>
  T Fwd(T x) const {
    const T z = T(beta) * x;
    if (z > T(threshold)) return x;
    return ((z > T(0) ? z : T(0)) + std::log1p(std::exp(-std::fabs(z)))) / T(beta);
  }
  template <typename T>
  T Grad(T x, T dout) const {
    const T z = T(beta) * x;
    if (z > T(threshold)) return dout;
    const T s = z >= T(0) ? T(1) / (T(1) + std::exp(-z)) : std::exp(z) / (T(1) + std::exp(z));
    return dout * s;
  }
  // z > threshold as z - threshold > 0: the same test for floats (the
  // difference is 0 only when they are equal; NaN fails both).
  EwValue AboveThreshold(EwProgram& p, EwValue z) const {
    return p.SelectGtZero(p.Sub(z, p.Const(threshold)), p.Const(1.0f));
  }
  EwValue Ew(EwProgram& p, EwValue x) const {
    const EwValue z = p.Mul(x, p.Const(beta));
    const EwValue soft = p.Add(p.Relu(z), p.Log1p(p.Exp(p.Neg(p.Abs(z)))));
    return p.Select(AboveThreshold(p, z), x, p.Div(soft, p.Const(beta)));
  }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    const EwValue z = p.Mul(x, p.Const(beta));
    return p.Select(AboveThreshold(p, z), g, p.Mul(g, p.Sigmoid(z)));
  }
  float beta;
  float threshold;
};

}  // namespace

void RegisterMathOps(OpRegistry& r) {
  using unary_op::RegisterUnaryOp;
  RegisterUnaryOp<Log>(r, "log", "Out = ln(X), the natural logarithm: NaN for X < 0, -inf at 0", {},
                       "Gradient of log: X@GRAD = Out@GRAD / X");
  RegisterUnaryOp<Sqrt>(r, "sqrt", "Out = sqrt(X); NaN for X < 0", {},
                        "Gradient of sqrt: X@GRAD = 0.5 * Out@GRAD / Out");
  RegisterUnaryOp<Rsqrt>(r, "rsqrt", "Out = 1 / sqrt(X); NaN for X < 0, inf at 0", {},
                         "Gradient of rsqrt: X@GRAD = -0.5 * Out@GRAD * Out^3");
  RegisterUnaryOp<Abs>(r, "abs", "Out = |X|", {},
                       "Gradient of abs: X@GRAD = Out@GRAD * sign(X), 0 where X is 0 (as PyTorch) or NaN");
  RegisterUnaryOp<Pow>(
      r, "pow",
      "Out = X^factor as torch.pow: an integer factor (negative ones too) is an exact integer power, so a negative "
      "X works (the JIT multiplies by repeated squaring and divides once, within about |factor| ulp); factor 0.5 is "
      "sqrt(X), -0.5 1/sqrt(X), 0 gives 1 (also for NaN); any other factor is exp(factor * ln X), NaN for X < 0 "
      "(the JIT's within about (1 + |factor * ln X|) ulp). factor must be finite",
      {{"factor", AttrKind::kFloat, Attribute(1.0f)}},
      "Gradient of pow: X@GRAD = factor * X^(factor - 1) * Out@GRAD, X^(factor - 1) as pow computes it; 0 for "
      "factor 0 (as PyTorch)");
  RegisterUnaryOp<LeakyRelu>(r, "leaky_relu", "Out = X where X > 0, else alpha * X (NaN stays NaN)",
                             {{"alpha", AttrKind::kFloat, Attribute(0.02f)}},
                             "Gradient of leaky_relu: X@GRAD = Out@GRAD where X > 0, else alpha * Out@GRAD");
  RegisterUnaryOp<Softplus>(
      r, "softplus",
      "Out = ln(1 + exp(beta * X)) / beta as torch.nn.functional.softplus, computed stably as (max(z, 0) + "
      "log1p(exp(-|z|))) / beta with z = beta * X; Out = X where z > threshold. beta must be finite and nonzero",
      {{"beta", AttrKind::kFloat, Attribute(1.0f)}, {"threshold", AttrKind::kFloat, Attribute(20.0f)}},
      "Gradient of softplus: X@GRAD = Out@GRAD * sigmoid(beta * X), Out@GRAD where beta * X > threshold");
}

}  // namespace kiln
