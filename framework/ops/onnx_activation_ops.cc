// elu, selu, celu, hard_sigmoid, hard_swish, thresholded_relu and their
// grads (Paddle's names and attributes; ONNX's defaults where they agree):
// unary_op functors (framework/ops/unary_op.h), all elementwise for the JIT.
// Every grad reads X.
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/ops.h"
#include "framework/ops/unary_op.h"

namespace kiln {
namespace {

// exp(z) - 1 without the cancellation of the subtraction near 0 (the
// reference is std::expm1): 2t / (1 - t) with t = tanh(z/2) is exact
// algebra, and the generated tanh keeps its relative accuracy for tiny z;
// 1 - t loses digits as t nears 1, so from z = 1 on exp(z) - 1 is used
// (exp(z) >= e: the subtraction costs at most a bit). -inf gives -1, +inf
// inf, NaN NaN (the select takes the exp branch).
EwValue EwExpm1(EwProgram& p, EwValue z) {
  const EwValue one = p.Const(1.0f);
  const EwValue t = p.Tanh(p.Mul(z, p.Const(0.5f)));
  const EwValue small = p.Div(p.Add(t, t), p.Sub(one, t));
  return p.Select(p.Lt(z, one), small, p.Sub(p.Exp(z), one));
}

EwValue EwPositive(EwProgram& p, EwValue x) { return p.Gt(x, p.Const(0.0f)); }

// elu: x > 0 ? x : alpha * expm1(x); selu scales both sides by `scale`.
template <typename T>
T EluRef(T x, T alpha) {
  return x > T(0) ? x : alpha * std::expm1(x);
}

struct Elu {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Elu(const Ctx& ctx) : alpha(ctx.template Attr<float>("alpha")) {}
  template <typename T>
  T Fwd(T x) const {
    return EluRef(x, T(alpha));
  }
  template <typename T>
  T Grad(T x, T dout) const {
    return x > T(0) ? dout : dout * T(alpha) * std::exp(x);
  }
  EwValue Ew(EwProgram& p, EwValue x) const {
    return p.Select(EwPositive(p, x), x, p.Mul(p.Const(alpha), EwExpm1(p, x)));
  }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    return p.Select(EwPositive(p, x), g, p.Mul(p.Mul(g, p.Const(alpha)), p.Exp(x)));
  }
  float alpha;
};

struct Selu {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Selu(const Ctx& ctx) : scale(ctx.template Attr<float>("scale")), alpha(ctx.template Attr<float>("alpha")) {}
  template <typename T>
  T Fwd(T x) const {
    return T(scale) * EluRef(x, T(alpha));
  }
  template <typename T>
  T Grad(T x, T dout) const {
    return x > T(0) ? dout * T(scale) : dout * T(scale) * T(alpha) * std::exp(x);
  }
  EwValue Ew(EwProgram& p, EwValue x) const {
    const EwValue elu = p.Select(EwPositive(p, x), x, p.Mul(p.Const(alpha), EwExpm1(p, x)));
    return p.Mul(p.Const(scale), elu);
  }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    const EwValue gs = p.Mul(g, p.Const(scale));
    return p.Select(EwPositive(p, x), gs, p.Mul(p.Mul(gs, p.Const(alpha)), p.Exp(x)));
  }
  float scale;
  float alpha;
};

// ONNX's max(0, x) + min(0, alpha * expm1(x / alpha)) is this select for
// either sign of alpha.
struct Celu {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit Celu(const Ctx& ctx) : alpha(ctx.template Attr<float>("alpha")) {}
  static void CheckAttrs(const InferShapeContext& ctx) {
    const float alpha = ctx.Attr<float>("alpha");
    if (alpha == 0.0f || !std::isfinite(alpha)) ctx.Fail("attribute alpha: expected a finite nonzero value, got ", alpha);
  }
  template <typename T>
  T Fwd(T x) const {
    return x > T(0) ? x : T(alpha) * std::expm1(x / T(alpha));
  }
  template <typename T>
  T Grad(T x, T dout) const {
    return x > T(0) ? dout : dout * std::exp(x / T(alpha));
  }
  EwValue Ew(EwProgram& p, EwValue x) const {
    return p.Select(EwPositive(p, x), x, p.Mul(p.Const(alpha), EwExpm1(p, p.Div(x, p.Const(alpha)))));
  }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    return p.Select(EwPositive(p, x), g, p.Mul(g, p.Exp(p.Div(x, p.Const(alpha)))));
  }
  float alpha;
};

// Clamps of t to [0, hi] that keep NaN (a NaN t fails both tests), where
// std::min/max and the IR's max/min would each need their own NaN rule.
template <typename T>
T ClampRef(T t, T hi) {
  return t < T(0) ? T(0) : t > hi ? hi : t;
}
EwValue EwClamp(EwProgram& p, EwValue t, float hi) {
  const EwValue h = p.Const(hi);
  return p.Select(p.Lt(t, p.Const(0.0f)), p.Const(0.0f), p.Select(p.Gt(t, h), h, t));
}
// v where 0 < t < hi, else 0 (also for NaN t).
EwValue EwInside(EwProgram& p, EwValue t, float hi, EwValue v) {
  return p.Select(p.Mul(p.Gt(t, p.Const(0.0f)), p.Lt(t, p.Const(hi))), v, p.Const(0.0f));
}

struct HardSigmoid {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit HardSigmoid(const Ctx& ctx)
      : slope(ctx.template Attr<float>("slope")), offset(ctx.template Attr<float>("offset")) {}
  template <typename T>
  T Fwd(T x) const {
    return ClampRef(T(slope) * x + T(offset), T(1));
  }
  // slope where the clamp is inactive (0 < t < 1 strictly, as Paddle), else 0.
  template <typename T>
  T Grad(T x, T dout) const {
    const T t = T(slope) * x + T(offset);
    return t > T(0) && t < T(1) ? dout * T(slope) : T(0);
  }
  EwValue Lin(EwProgram& p, EwValue x) const { return p.Add(p.Mul(p.Const(slope), x), p.Const(offset)); }
  EwValue Ew(EwProgram& p, EwValue x) const { return EwClamp(p, Lin(p, x), 1.0f); }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    return EwInside(p, Lin(p, x), 1.0f, p.Mul(g, p.Const(slope)));
  }
  float slope;
  float offset;
};

// Paddle's hard_swish: x * clamp(x + offset, 0, threshold) / scale; the
// defaults (6, 6, 3) make it ONNX's HardSwish, x * max(0, min(1, x/6 + 1/2)).
struct HardSwish {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit HardSwish(const Ctx& ctx)
      : threshold(ctx.template Attr<float>("threshold")),
        scale(ctx.template Attr<float>("scale")),
        offset(ctx.template Attr<float>("offset")) {}
  static void CheckAttrs(const InferShapeContext& ctx) {
    const float scale = ctx.Attr<float>("scale");
    if (scale == 0.0f || !std::isfinite(scale)) ctx.Fail("attribute scale: expected a finite nonzero value, got ", scale);
  }
  template <typename T>
  T Fwd(T x) const {
    return x * ClampRef(x + T(offset), T(threshold)) / T(scale);
  }
  // 0 below the ramp, threshold / scale above it, (2x + offset) / scale on it.
  template <typename T>
  T Grad(T x, T dout) const {
    const T u = x + T(offset);
    if (u < T(0)) return T(0);
    if (u > T(threshold)) return dout * T(threshold) / T(scale);
    return dout * (x + u) / T(scale);
  }
  EwValue Ew(EwProgram& p, EwValue x) const {
    return p.Div(p.Mul(x, EwClamp(p, p.Add(x, p.Const(offset)), threshold)), p.Const(scale));
  }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const {
    const EwValue u = p.Add(x, p.Const(offset));
    const EwValue ramp = p.Div(p.Mul(g, p.Add(x, u)), p.Const(scale));
    const EwValue above = p.Div(p.Mul(g, p.Const(threshold)), p.Const(scale));
    return p.Select(p.Lt(u, p.Const(0.0f)), p.Const(0.0f), p.Select(p.Gt(u, p.Const(threshold)), above, ramp));
  }
  float threshold;
  float scale;
  float offset;
};

struct ThresholdedRelu {
  static constexpr const char* kGradReads = "X";
  template <typename Ctx>
  explicit ThresholdedRelu(const Ctx& ctx) : threshold(ctx.template Attr<float>("threshold")) {}
  template <typename T>
  T Fwd(T x) const {
    return x > T(threshold) ? x : T(0);
  }
  template <typename T>
  T Grad(T x, T dout) const {
    return x > T(threshold) ? dout : T(0);
  }
  EwValue Above(EwProgram& p, EwValue x) const { return p.Gt(x, p.Const(threshold)); }
  EwValue Ew(EwProgram& p, EwValue x) const { return p.Select(Above(p, x), x, p.Const(0.0f)); }
  EwValue EwGrad(EwProgram& p, EwValue x, EwValue g) const { return p.Select(Above(p, x), g, p.Const(0.0f)); }
  float threshold;
};

}  // namespace

void RegisterOnnxActivationOps(OpRegistry& r) {
  using unary_op::RegisterUnaryOp;
  const std::string expm1 = " (expm1 in the JIT: 2t/(1-t), t = tanh(z/2), below 1, exp(z) - 1 above)";
  RegisterUnaryOp<Elu>(r, "elu", "Out = X where X > 0, else alpha * (exp(X) - 1)" + expm1,
                       {{"alpha", AttrKind::kFloat, Attribute(1.0f)}},
                       "Gradient of elu: X@GRAD = Out@GRAD where X > 0, else Out@GRAD * alpha * exp(X)");
  RegisterUnaryOp<Selu>(
      r, "selu", "Out = scale * (X where X > 0, else alpha * (exp(X) - 1)); defaults as ONNX and torch" + expm1,
      {{"scale", AttrKind::kFloat, Attribute(1.05070102214813232421875f)},
       {"alpha", AttrKind::kFloat, Attribute(1.67326319217681884765625f)}},
      "Gradient of selu: X@GRAD = scale * Out@GRAD where X > 0, else scale * alpha * exp(X) * Out@GRAD");
  RegisterUnaryOp<Celu>(r, "celu",
                        "Out = max(0, X) + min(0, alpha * (exp(X / alpha) - 1)), i.e. X where X > 0, else alpha * "
                        "(exp(X / alpha) - 1); alpha must be finite and nonzero" + expm1,
                        {{"alpha", AttrKind::kFloat, Attribute(1.0f)}},
                        "Gradient of celu: X@GRAD = Out@GRAD where X > 0, else Out@GRAD * exp(X / alpha)");
  RegisterUnaryOp<HardSigmoid>(
      r, "hard_sigmoid",
      "Out = clamp(slope * X + offset, 0, 1) (ONNX HardSigmoid's alpha is slope, beta offset); NaN stays NaN",
      {{"slope", AttrKind::kFloat, Attribute(0.2f)}, {"offset", AttrKind::kFloat, Attribute(0.5f)}},
      "Gradient of hard_sigmoid: X@GRAD = slope * Out@GRAD where 0 < slope * X + offset < 1, else 0");
  RegisterUnaryOp<HardSwish>(
      r, "hard_swish",
      "Out = X * clamp(X + offset, 0, threshold) / scale; the defaults give ONNX HardSwish, X * max(0, min(1, X/6 + "
      "1/2)). NaN stays NaN; scale must be finite and nonzero",
      {{"threshold", AttrKind::kFloat, Attribute(6.0f)},
       {"scale", AttrKind::kFloat, Attribute(6.0f)},
       {"offset", AttrKind::kFloat, Attribute(3.0f)}},
      "Gradient of hard_swish: X@GRAD = 0 where X + offset < 0, Out@GRAD * threshold / scale where X + offset > "
      "threshold, else Out@GRAD * (2X + offset) / scale");
  RegisterUnaryOp<ThresholdedRelu>(r, "thresholded_relu",
                                   "Out = X where X > threshold, else 0 (ONNX ThresholdedRelu's alpha; NaN gives 0)",
                                   {{"threshold", AttrKind::kFloat, Attribute(1.0f)}},
                                   "Gradient of thresholded_relu: X@GRAD = Out@GRAD where X > threshold, else 0");
}

}  // namespace kiln
