// relu, tanh, sigmoid, exp, gelu, scale and their grads. Every op may run in
// place (X -> Out). The grads of relu/tanh/sigmoid/exp read Out (so X may have
// been overwritten), gelu's reads X, scale's reads only Out@GRAD.
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/ops.h"
#include "framework/ops/unary_op.h"

namespace kiln {
namespace {

// Each activation is a unary_op functor (framework/ops/unary_op.h).
struct Relu {
  static constexpr const char* kGradReads = "Out";
  template <typename Ctx>
  explicit Relu(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return x <= T(0) ? T(0) : x;  // NaN stays NaN, as in PyTorch
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return out > T(0) ? dout : T(0);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Relu(x); }
  EwValue EwGrad(EwProgram& p, EwValue v, EwValue g) const { return p.SelectGtZero(v, g); }
};

struct Tanh {
  static constexpr const char* kGradReads = "Out";
  template <typename Ctx>
  explicit Tanh(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::tanh(x);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return dout * (T(1) - out * out);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Tanh(x); }
  EwValue EwGrad(EwProgram& p, EwValue v, EwValue g) const {
    return p.Mul(g, p.Sub(p.Const(1.f), p.Mul(v, v)));
  }
};

struct Sigmoid {
  static constexpr const char* kGradReads = "Out";
  template <typename Ctx>
  explicit Sigmoid(const Ctx&) {}
  // Two branches so that exp never overflows.
  template <typename T>
  T Fwd(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return dout * out * (T(1) - out);
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Sigmoid(x); }
  EwValue EwGrad(EwProgram& p, EwValue v, EwValue g) const {
    return p.Mul(p.Mul(g, v), p.Sub(p.Const(1.f), v));
  }
};

struct Exp {
  static constexpr const char* kGradReads = "Out";
  template <typename Ctx>
  explicit Exp(const Ctx&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::exp(x);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return dout * out;
  }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Exp(x); }
  EwValue EwGrad(EwProgram& p, EwValue v, EwValue g) const { return p.Mul(g, v); }
};

// erf form: x * Phi(x). approximate: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct Gelu {
  static constexpr const char* kGradReads = "X";
  static constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/sqrt(2)
  static constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
  static constexpr double kSqrt2OverPi = 0.79788456080286535588;
  static constexpr double kCubic = 0.044715;
  template <typename Ctx>
  explicit Gelu(const Ctx& ctx) : approximate(ctx.template Attr<bool>("approximate")) {}
  template <typename T>
  T Fwd(T x) const {
    if (approximate) {
      const T u = T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
      return T(0.5) * x * (T(1) + std::tanh(u));
    }
    return T(0.5) * x * (T(1) + std::erf(x * T(kSqrt1_2)));
  }
  template <typename T>
  T Grad(T x, T dout) const {
    if (approximate) {
      const T u = T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
      const T t = std::tanh(u);
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x * x);
      return dout * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
    }
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(kSqrt1_2)));
    const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
    return dout * (cdf + x * pdf);
  }
  bool approximate;
  EwValue Ew(EwProgram& p, EwValue x) const { return approximate ? p.GeluTanh(x) : p.Gelu(x); }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    return approximate ? p.GeluTanhGrad(x, g) : p.GeluGrad(x, g);
  }
};

struct Scale {
  static constexpr const char* kGradReads = nullptr;  // only Out@GRAD
  template <typename Ctx>
  explicit Scale(const Ctx& ctx)
      : scale(ctx.template Attr<float>("scale")),
        bias(ctx.template Attr<float>("bias")),
        after(ctx.template Attr<bool>("bias_after_scale")) {}
  template <typename T>
  T Fwd(T x) const {
    return after ? T(scale) * x + T(bias) : T(scale) * (x + T(bias));
  }
  template <typename T>
  T Grad(T, T dout) const {
    return T(scale) * dout;
  }
  float scale;
  float bias;
  bool after;
  EwValue Ew(EwProgram& p, EwValue x) const {
    return after ? p.Fma(x, p.Const(scale), p.Const(bias)) : p.Mul(p.Add(x, p.Const(bias)), p.Const(scale));
  }
  EwValue EwGrad(EwProgram& p, EwValue, EwValue g) const { return p.Mul(g, p.Const(scale)); }
};

}  // namespace

void RegisterActivationOps(OpRegistry& r) {
  using unary_op::RegisterUnaryOp;
  RegisterUnaryOp<Relu>(r, "relu", "Out = max(X, 0); NaN stays NaN (as in PyTorch)", {});
  RegisterUnaryOp<Tanh>(r, "tanh", "Out = tanh(X)", {});
  RegisterUnaryOp<Sigmoid>(r, "sigmoid", "Out = 1 / (1 + exp(-X))", {});
  RegisterUnaryOp<Exp>(r, "exp", "Out = exp(X)", {});
  RegisterUnaryOp<Gelu>(r, "gelu", "Out = X * Phi(X) (erf form), or its tanh approximation when approximate",
                        {{"approximate", AttrKind::kBool, Attribute(false)}});
  RegisterUnaryOp<Scale>(r, "scale", "Out = scale * X + bias, or scale * (X + bias) when !bias_after_scale",
                         {{"scale", AttrKind::kFloat, Attribute(1.0f)},
                          {"bias", AttrKind::kFloat, Attribute(0.0f)},
                          {"bias_after_scale", AttrKind::kBool, Attribute(true)}});
}

}  // namespace kiln
