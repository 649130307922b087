// sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh and their
// grads: unary_op functors (framework/ops/unary_op.h) over <cmath>.
//
// JIT: the forwards are kFramework. The generated kernels have no sin/cos
// polynomials with range reduction, and the exp/log forms of the hyperbolic
// functions overflow (cosh near 89, acosh from 1.8e19 on, where x^2 does) or
// cancel (sinh, asinh near 0) where <cmath> does not. The grads that are
// rational functions and square roots of X (or of tan's Out) are exact in
// the IR and elementwise; those of sin, cos, sinh and cosh need the same
// missing functions and are kFramework.
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/ops.h"
#include "framework/ops/unary_op.h"

namespace kiln {
namespace {

// A functor whose forward and grad (which reads X) are <cmath> expressions in
// x (and dout): no elementwise form, so kFramework.
#define KILN_TRIG_FRAMEWORK(Name, fwd_expr, grad_expr) \
  struct Name {                                        \
    static constexpr const char* kGradReads = "X";     \
    template <typename Ctx>                            \
    explicit Name(const Ctx&) {}                       \
    template <typename T>                              \
    T Fwd(T x) const {                                 \
      return fwd_expr;                                 \
    }                                                  \
    template <typename T>                              \
    T Grad(T x, T dout) const {                        \
      return grad_expr;                                \
    }                                                  \
  };

KILN_TRIG_FRAMEWORK(Sin, std::sin(x), dout * std::cos(x))
KILN_TRIG_FRAMEWORK(Cos, std::cos(x), -(dout * std::sin(x)))
KILN_TRIG_FRAMEWORK(Sinh, std::sinh(x), dout * std::cosh(x))
KILN_TRIG_FRAMEWORK(Cosh, std::cosh(x), dout * std::sinh(x))
#undef KILN_TRIG_FRAMEWORK

// tan' = 1 + tan^2: read from Out, no second tan.
struct Tan {
  static constexpr const char* kGradReads = "Out";
  template <typename Ctx>
  explicit Tan(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::tan(x);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return dout * (T(1) + out * out);
  }
  EwValue EwGrad(EwProgram& p, EwValue out, EwValue g) const {
    return p.Mul(g, p.Add(p.Const(1.0f), p.Mul(out, out)));
  }
};

// The inverse functions: their grads are dout * sign / sqrt(q) or dout *
// sign / q for a quadratic q(x) = c + s x^2, written once for the reference
// and the IR so that both round the same steps.
enum class Root { kSqrt, kNone };

template <int kConst, int kSquareSign, int kOutSign, Root kRoot>
struct InverseGrad {
  static constexpr const char* kGradReads = "X";
  template <typename T>
  T Grad(T x, T dout) const {
    const T q = kSquareSign > 0 ? T(kConst) + x * x : T(kConst) - x * x;
    const T d = kRoot == Root::kSqrt ? std::sqrt(q) : q;
    return kOutSign > 0 ? dout / d : -(dout / d);
  }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    const EwValue c = p.Const(static_cast<float>(kConst)), x2 = p.Mul(x, x);
    const EwValue q = kSquareSign > 0 ? p.Add(c, x2) : p.Sub(c, x2);
    const EwValue d = kRoot == Root::kSqrt ? p.Sqrt(q) : q;
    return kOutSign > 0 ? p.Div(g, d) : p.Neg(p.Div(g, d));
  }
};

// acosh's quadratic x^2 - 1 is written as -1 + x^2: the same single rounding.
#define KILN_INVERSE(Name, fwd_expr, c, s, sign, root)    \
  struct Name : InverseGrad<c, s, sign, root> {           \
    template <typename Ctx>                               \
    explicit Name(const Ctx&) {}                          \
    template <typename T>                                 \
    T Fwd(T x) const {                                    \
      return fwd_expr;                                    \
    }                                                     \
  };

KILN_INVERSE(Asin, std::asin(x), 1, -1, 1, Root::kSqrt)
KILN_INVERSE(Acos, std::acos(x), 1, -1, -1, Root::kSqrt)
KILN_INVERSE(Atan, std::atan(x), 1, 1, 1, Root::kNone)
KILN_INVERSE(Asinh, std::asinh(x), 1, 1, 1, Root::kSqrt)
KILN_INVERSE(Acosh, std::acosh(x), -1, 1, 1, Root::kSqrt)
KILN_INVERSE(Atanh, std::atanh(x), 1, -1, 1, Root::kNone)
#undef KILN_INVERSE

}  // namespace

void RegisterTrigOps(OpRegistry& r) {
  using unary_op::RegisterUnaryOp;
  const std::string fw = ". JIT: framework (the generated kernels have no ";
  const std::string no_trig = fw + "sin/cos/tan polynomials)";
  const std::string no_inv = fw + "inverse trigonometric polynomials)";
  const std::string no_hyp = fw + "accurate form over the whole f32 range)";
  RegisterUnaryOp<Sin>(r, "sin", "Out = sin(X) (radians)" + no_trig, {},
                       "Gradient of sin: X@GRAD = Out@GRAD * cos(X). JIT: framework");
  RegisterUnaryOp<Cos>(r, "cos", "Out = cos(X) (radians)" + no_trig, {},
                       "Gradient of cos: X@GRAD = -Out@GRAD * sin(X). JIT: framework");
  RegisterUnaryOp<Tan>(r, "tan", "Out = tan(X) (radians)" + no_trig, {},
                       "Gradient of tan: X@GRAD = Out@GRAD * (1 + Out^2)");
  RegisterUnaryOp<Asin>(r, "asin", "Out = asin(X) in [-pi/2, pi/2]; NaN outside [-1, 1]" + no_inv, {},
                        "Gradient of asin: X@GRAD = Out@GRAD / sqrt(1 - X^2)");
  RegisterUnaryOp<Acos>(r, "acos", "Out = acos(X) in [0, pi]; NaN outside [-1, 1]" + no_inv, {},
                        "Gradient of acos: X@GRAD = -Out@GRAD / sqrt(1 - X^2)");
  RegisterUnaryOp<Atan>(r, "atan", "Out = atan(X) in (-pi/2, pi/2)" + no_inv, {},
                        "Gradient of atan: X@GRAD = Out@GRAD / (1 + X^2)");
  RegisterUnaryOp<Sinh>(r, "sinh", "Out = sinh(X)" + no_hyp, {},
                        "Gradient of sinh: X@GRAD = Out@GRAD * cosh(X). JIT: framework");
  RegisterUnaryOp<Cosh>(r, "cosh", "Out = cosh(X)" + no_hyp, {},
                        "Gradient of cosh: X@GRAD = Out@GRAD * sinh(X). JIT: framework");
  RegisterUnaryOp<Asinh>(r, "asinh", "Out = asinh(X)" + no_hyp, {},
                         "Gradient of asinh: X@GRAD = Out@GRAD / sqrt(1 + X^2)");
  RegisterUnaryOp<Acosh>(r, "acosh", "Out = acosh(X); NaN below 1" + no_hyp, {},
                         "Gradient of acosh: X@GRAD = Out@GRAD / sqrt(X^2 - 1)");
  RegisterUnaryOp<Atanh>(r, "atanh", "Out = atanh(X); NaN outside [-1, 1], +-inf at +-1" + no_hyp, {},
                         "Gradient of atanh: X@GRAD = Out@GRAD / (1 - X^2)");
}

}  // namespace kiln
