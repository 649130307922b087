// relu, tanh, sigmoid, exp, gelu, scale and their grads. Every op may run in
// place (X -> Out). The grads of relu/tanh/sigmoid/exp read Out (so X may have
// been overwritten), gelu's reads X, scale's reads only Out@GRAD.
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// Each activation: constructed from the op's attrs (an ExecContext, or the
// JIT's EwOpView); Fwd(x) is the op, Grad(v, dout) the input gradient where v
// is the value of the slot kGradReads names. Ew and EwGrad are the same for
// the JIT, as EwProgram.
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

template <typename Act>
void ActivationKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  const Act act(ctx);
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    // Out may be X's buffer (in place): element i is read before it is written.
    T* o = out->mutable_data<T>();
    const T* xp = x.data<T>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = act.template Fwd<T>(xp[i]);
  });
}

void InferActivation(InferShapeContext& ctx) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "X");
  ctx.SetOutput("Out", ctx.InputDims("X"), dtype);
}

template <typename Act>
void InferActivationGrad(InferShapeContext& ctx) {
  const std::string dout = GradVarName("Out");
  const bool has_dout = ctx.HasInput(dout);
  if (Act::kGradReads == nullptr && !has_dout) {
    ctx.Fail("input ", dout, " is required (it gives X@GRAD its dims)");
  }
  const std::string src = Act::kGradReads ? Act::kGradReads : dout;
  const DataType dtype = ops_a::CheckFloatInput(ctx, src);
  const Dims dims = ctx.InputDims(src);
  if (has_dout && src != dout) {
    ops_a::CheckSameDtype(ctx, dout, dtype, src);
    ops_a::CheckSameDims(ctx, dout, dims, src);
  }
  ctx.SetOutput(GradVarName("X"), dims, dtype);
}

template <typename Act>
void ActivationGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  const Tensor* v = nullptr;
  if constexpr (Act::kGradReads != nullptr) {
    v = &ctx.Input(Act::kGradReads);
  } else {
    v = &ctx.Input(GradVarName("Out"));
  }
  const Act act(ctx);
  ops_a::DispatchFloat(ctx, v->dtype(), "input", [&](auto tag) {
    using T = decltype(tag);
    if (dout == nullptr) {  // no gradient flows into Out: zeros
      ops_a::ZeroFill<T>(dx);
      return;
    }
    T* p = dx->mutable_data<T>();
    const T* vp = v->data<T>();
    const T* g = dout->data<T>();
    const int64_t n = v->numel();
    for (int64_t i = 0; i < n; ++i) p[i] = act.template Grad<T>(vp[i], g[i]);
  });
}

// The JIT's form: one fragment over X's (dOut's) dims.
template <typename Act>
std::vector<EwFragment> EwForward(const EwOpView& v) {
  const std::string x = v.In("X"), out = v.Out("Out");
  if (x.empty() || out.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(x)};
  f.writes = {v.Full(out)};
  const Act act(v);
  f.emit = [act](EwProgram& p, const std::vector<EwValue>& in) { return std::vector<EwValue>{act.Ew(p, in[0])}; };
  return {f};
}

template <typename Act>
std::vector<EwFragment> EwBackward(const EwOpView& v) {
  const std::string dout = v.In(GradVarName("Out")), dx = v.Out(GradVarName("X"));
  std::string src;
  if constexpr (Act::kGradReads != nullptr) {
    src = v.In(Act::kGradReads);
    if (src.empty()) return {};
  }
  if (dout.empty() || dx.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(dout);
  f.reads = {v.Full(dout)};
  if (!src.empty()) f.reads.push_back(v.Full(src));
  f.writes = {v.Full(dx)};
  const Act act(v);
  f.emit = [act](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{act.EwGrad(p, in.size() > 1 ? in[1] : -1, in[0])};
  };
  return {f};
}

template <typename Act>
void RegisterOne(OpRegistry& r, const std::string& type, const std::string& doc, std::vector<AttrDef> attrs) {
  OpInfo fwd;
  fwd.type = type;
  fwd.doc = doc;
  fwd.inputs = {ops_a::Required("X")};
  fwd.outputs = {ops_a::Required("Out")};
  fwd.attrs = attrs;
  fwd.infer_shape = InferActivation;
  fwd.reference_kernel = ActivationKernel<Act>;
  fwd.grad_maker = [](const proto::OpDesc& op) {
    std::vector<std::string> fwd_inputs, fwd_outputs;
    if (Act::kGradReads != nullptr && std::string(Act::kGradReads) == "X") fwd_inputs = {"X"};
    if (Act::kGradReads != nullptr && std::string(Act::kGradReads) == "Out") fwd_outputs = {"Out"};
    return std::vector<proto::OpDesc>{MakeGradOp(op, fwd_inputs, fwd_outputs, {"Out"}, {"X"})};
  };
  fwd.inplace = {{"X", "Out"}};
  fwd.jit = JitLowering::kElementwise;
  fwd.elementwise = EwForward<Act>;
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = type + "_grad";
  grad.doc = "gradient of " + type;
  if (Act::kGradReads != nullptr) grad.inputs.push_back(ops_a::Required(Act::kGradReads));
  grad.inputs.push_back(ops_a::Optional(GradVarName("Out")));
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = std::move(attrs);
  grad.infer_shape = InferActivationGrad<Act>;
  grad.reference_kernel = ActivationGradKernel<Act>;
  grad.jit = JitLowering::kElementwise;
  grad.elementwise = EwBackward<Act>;
  r.Add(std::move(grad));
}

}  // namespace

void RegisterActivationOps(OpRegistry& r) {
  RegisterOne<Relu>(r, "relu", "Out = max(X, 0); NaN stays NaN (as in PyTorch)", {});
  RegisterOne<Tanh>(r, "tanh", "Out = tanh(X)", {});
  RegisterOne<Sigmoid>(r, "sigmoid", "Out = 1 / (1 + exp(-X))", {});
  RegisterOne<Exp>(r, "exp", "Out = exp(X)", {});
  RegisterOne<Gelu>(r, "gelu", "Out = X * Phi(X) (erf form), or its tanh approximation when approximate",
                    {{"approximate", AttrKind::kBool, Attribute(false)}});
  RegisterOne<Scale>(r, "scale", "Out = scale * X + bias, or scale * (X + bias) when !bias_after_scale",
                     {{"scale", AttrKind::kFloat, Attribute(1.0f)},
                      {"bias", AttrKind::kFloat, Attribute(0.0f)},
                      {"bias_after_scale", AttrKind::kBool, Attribute(true)}});
}

}  // namespace kiln
