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

// Each activation: constructed from the op's attrs; Fwd(x) is the op, Grad(v, dout)
// the input gradient where v is the value of the slot kGradReads names.
struct Relu {
  static constexpr const char* kGradReads = "Out";
  explicit Relu(const ExecContext&) {}
  template <typename T>
  T Fwd(T x) const {
    return x > T(0) ? x : T(0);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return out > T(0) ? dout : T(0);
  }
};

struct Tanh {
  static constexpr const char* kGradReads = "Out";
  explicit Tanh(const ExecContext&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::tanh(x);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return dout * (T(1) - out * out);
  }
};

struct Sigmoid {
  static constexpr const char* kGradReads = "Out";
  explicit Sigmoid(const ExecContext&) {}
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
};

struct Exp {
  static constexpr const char* kGradReads = "Out";
  explicit Exp(const ExecContext&) {}
  template <typename T>
  T Fwd(T x) const {
    return std::exp(x);
  }
  template <typename T>
  T Grad(T out, T dout) const {
    return dout * out;
  }
};

// erf form: x * Phi(x). approximate: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct Gelu {
  static constexpr const char* kGradReads = "X";
  static constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/sqrt(2)
  static constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
  static constexpr double kSqrt2OverPi = 0.79788456080286535588;
  static constexpr double kCubic = 0.044715;
  explicit Gelu(const ExecContext& ctx) : approximate(ctx.Attr<bool>("approximate")) {}
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
};

struct Scale {
  static constexpr const char* kGradReads = nullptr;  // only Out@GRAD
  explicit Scale(const ExecContext& ctx)
      : scale(ctx.Attr<float>("scale")), bias(ctx.Attr<float>("bias")), after(ctx.Attr<bool>("bias_after_scale")) {}
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
  r.Add(std::move(grad));
}

}  // namespace

void RegisterActivationOps(OpRegistry& r) {
  RegisterOne<Relu>(r, "relu", "Out = max(X, 0)", {});
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
