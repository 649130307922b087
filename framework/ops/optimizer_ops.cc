// sgd, momentum, adam and adamw. Outputs normally name the same vars as their inputs
// (ParamOut is Param): every kernel reads scalars first and then updates each
// element from that element alone, so running in place is safe. Each takes
// gradient merge's optional Apply flag (apply_gate.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/apply_gate.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// Fails unless input `slot` holds one element (dims all 1, or -1 at build time).
DataType CheckScalarInput(const InferShapeContext& ctx, std::string_view slot) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, slot);
  for (int64_t d : ctx.InputDims(slot)) {
    if (d != 1 && d != -1)
      ctx.Fail("input ", slot, ": expected one element ([1]), got ", DimsToString(ctx.InputDims(slot)));
  }
  return dtype;
}

// Checks Param and the inputs that must match it (Grad, moments); sets the
// matching outputs (slot + "Out") to Param's dims and dtype.
void InferParamLike(InferShapeContext& ctx, const std::vector<std::string>& like_param,
                    const std::vector<std::string>& scalars) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "Param");
  const Dims dims = ctx.InputDims("Param");
  for (const auto& slot : like_param) {
    ops_a::CheckSameDtype(ctx, slot, dtype, "Param");
    ops_a::CheckSameDims(ctx, slot, dims, "Param");
  }
  for (const auto& slot : scalars) CheckScalarInput(ctx, slot);
  if (ctx.HasInput("GradScale")) CheckScalarInput(ctx, "GradScale");
  const float lo = ctx.Attr<float>("grad_clip_min"), hi = ctx.Attr<float>("grad_clip_max");
  if (!(lo <= hi)) ctx.Fail("attributes grad_clip_min, grad_clip_max: expected min <= max, got ", lo, ", ", hi);
  ctx.SetOutput("ParamOut", dims, dtype);
  for (const auto& slot : like_param) {
    if (slot != "Grad") ctx.SetOutput(slot + "Out", dims, dtype);
  }
}

// Reads Param/Grad dims at run time too: a kernel must not trust callers that
// skipped validation with mismatched feeds.
void CheckRuntimeSameDims(const ExecContext& ctx, const std::vector<std::string>& slots) {
  const Dims& dims = ctx.Input("Param").dims();
  for (const auto& s : slots) {
    if (ctx.Input(s).dims() != dims) {
      ctx.Fail("input ", s, ": expected dims ", DimsToString(dims), " (as Param), got ",
               DimsToString(ctx.Input(s).dims()));
    }
  }
}

// Paddle's L2Decay as the update ops' `regularization_coeff`: the gradient
// the step sees is g + coeff * p, computed inside the update (no extra pass
// over the weights). Zero (the default) leaves g untouched bit for bit.
template <typename T>
T L2Grad(T g, T p, T coeff) {
  return coeff == T(0) ? g : g + coeff * p;
}

// Paddle's grad_clip inside the update, on the raw gradient and so before
// the L2 term above (Paddle's order): g * GradScale (ClipGradByGlobalNorm's
// factor, which clip_by_global_norm computes; 1 when the input is absent),
// then clamped to [grad_clip_min, grad_clip_max] (ClipGradByValue; the
// infinite defaults leave g as it is, NaN included).
template <typename T>
struct GradClip {
  T scale, lo, hi;
  T operator()(T g) const { return std::min(std::max(g * scale, lo), hi); }
};

template <typename T>
GradClip<T> ReadGradClip(const ExecContext& ctx) {
  const double scale = ctx.InputOrNull("GradScale") ? ops_a::ReadScalar(ctx, "GradScale") : 1.0;
  return {static_cast<T>(scale), static_cast<T>(ctx.Attr<float>("grad_clip_min")),
          static_cast<T>(ctx.Attr<float>("grad_clip_max"))};
}

void SgdKernel(ExecContext& ctx) {
  CheckRuntimeSameDims(ctx, {"Grad"});
  const double lr = ops_a::ReadScalar(ctx, "LearningRate");
  const double l2 = ctx.Attr<float>("regularization_coeff");
  const Tensor& param = ctx.Input("Param");
  const Tensor& grad = ctx.Input("Grad");
  Tensor* param_out = ctx.Output("ParamOut");
  ops_a::DispatchFloat(ctx, param.dtype(), "input Param", [&](auto tag) {
    using T = decltype(tag);
    const T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* po = param_out->mutable_data<T>();
    const T lr_t = static_cast<T>(lr);
    const T l2_t = static_cast<T>(l2);
    const GradClip<T> clip = ReadGradClip<T>(ctx);
    for (int64_t i = 0; i < param.numel(); ++i) po[i] = p[i] - lr_t * L2Grad(clip(g[i]), p[i], l2_t);
  });
}

void MomentumKernel(ExecContext& ctx) {
  CheckRuntimeSameDims(ctx, {"Grad", "Velocity"});
  const double lr = ops_a::ReadScalar(ctx, "LearningRate");
  const double mu = ctx.Attr<float>("mu");
  const bool nesterov = ctx.Attr<bool>("use_nesterov");
  const double l2 = ctx.Attr<float>("regularization_coeff");
  const Tensor& param = ctx.Input("Param");
  const Tensor& grad = ctx.Input("Grad");
  const Tensor& velocity = ctx.Input("Velocity");
  Tensor* param_out = ctx.Output("ParamOut");
  Tensor* velocity_out = ctx.Output("VelocityOut");
  ops_a::DispatchFloat(ctx, param.dtype(), "input Param", [&](auto tag) {
    using T = decltype(tag);
    const T* p = param.data<T>();
    const T* g = grad.data<T>();
    const T* v = velocity.data<T>();
    T* po = param_out->mutable_data<T>();
    T* vo = velocity_out->mutable_data<T>();
    const T lr_t = static_cast<T>(lr);
    const T mu_t = static_cast<T>(mu);
    const T l2_t = static_cast<T>(l2);
    const GradClip<T> clip = ReadGradClip<T>(ctx);
    for (int64_t i = 0; i < param.numel(); ++i) {
      const T gi = L2Grad(clip(g[i]), p[i], l2_t);
      const T v_new = mu_t * v[i] + gi;
      const T step = nesterov ? gi + mu_t * v_new : v_new;
      vo[i] = v_new;
      po[i] = p[i] - lr_t * step;
    }
  });
}

// adam (l2: regularization_coeff, decay 0) and adamw (l2 0, decay: coeff).
// adamw decays decoupled from the moments, as PyTorch's AdamW:
// p = p * (1 - lr * coeff), then the Adam step.
void AdamStep(ExecContext& ctx, double l2, double decay) {
  CheckRuntimeSameDims(ctx, {"Grad", "Moment1", "Moment2"});
  const double lr = ops_a::ReadScalar(ctx, "LearningRate");
  // The pows are read before Beta*PowOut (usually the same vars) is written.
  const double b1_pow = ops_a::ReadScalar(ctx, "Beta1Pow");
  const double b2_pow = ops_a::ReadScalar(ctx, "Beta2Pow");
  const DataType b1_pow_dtype = ctx.Input("Beta1Pow").dtype();
  const DataType b2_pow_dtype = ctx.Input("Beta2Pow").dtype();
  const double beta1 = ctx.Attr<float>("beta1");
  const double beta2 = ctx.Attr<float>("beta2");
  const double eps = ctx.Attr<float>("epsilon");
  const Tensor& param = ctx.Input("Param");
  const Tensor& grad = ctx.Input("Grad");
  const Tensor& moment1 = ctx.Input("Moment1");
  const Tensor& moment2 = ctx.Input("Moment2");
  Tensor* param_out = ctx.Output("ParamOut");
  Tensor* moment1_out = ctx.Output("Moment1Out");
  Tensor* moment2_out = ctx.Output("Moment2Out");
  // Bias corrections folded into the step size and epsilon (OPS.md).
  const double lr_t = lr * std::sqrt(1 - b2_pow) / (1 - b1_pow);
  const double eps_t = eps * std::sqrt(1 - b2_pow);
  ops_a::DispatchFloat(ctx, param.dtype(), "input Param", [&](auto tag) {
    using T = decltype(tag);
    const T* p = param.data<T>();
    const T* g = grad.data<T>();
    const T* m1 = moment1.data<T>();
    const T* m2 = moment2.data<T>();
    T* po = param_out->mutable_data<T>();
    T* m1o = moment1_out->mutable_data<T>();
    T* m2o = moment2_out->mutable_data<T>();
    const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
    const T c1 = static_cast<T>(1 - beta1), c2 = static_cast<T>(1 - beta2);
    const T lr_c = static_cast<T>(lr_t), eps_c = static_cast<T>(eps_t);
    const T l2_t = static_cast<T>(l2);
    const T keep = static_cast<T>(1 - lr * decay);
    const GradClip<T> clip = ReadGradClip<T>(ctx);
    for (int64_t i = 0; i < param.numel(); ++i) {
      const T gi = L2Grad(clip(g[i]), p[i], l2_t);
      const T m = b1 * m1[i] + c1 * gi;
      const T v = b2 * m2[i] + c2 * gi * gi;
      m1o[i] = m;
      m2o[i] = v;
      const T pd = decay == 0 ? p[i] : p[i] * keep;
      po[i] = pd - lr_c * m / (std::sqrt(v) + eps_c);
    }
  });
  ops_a::WriteScalar(ctx.Output("Beta1PowOut"), b1_pow_dtype, b1_pow * beta1);
  ops_a::WriteScalar(ctx.Output("Beta2PowOut"), b2_pow_dtype, b2_pow * beta2);
}

void AdamKernel(ExecContext& ctx) { AdamStep(ctx, ctx.Attr<float>("regularization_coeff"), 0); }
void AdamWKernel(ExecContext& ctx) { AdamStep(ctx, 0, ctx.Attr<float>("coeff")); }

void InferAdam(InferShapeContext& ctx) {
  InferParamLike(ctx, {"Grad", "Moment1", "Moment2"}, {"LearningRate", "Beta1Pow", "Beta2Pow"});
  ctx.SetOutput("Beta1PowOut", ctx.InputDims("Beta1Pow"), ctx.InputDtype("Beta1Pow"));
  ctx.SetOutput("Beta2PowOut", ctx.InputDims("Beta2Pow"), ctx.InputDtype("Beta2Pow"));
}

std::vector<SlotDef> Slots(const std::vector<std::string>& names) {
  std::vector<SlotDef> out;
  for (const auto& n : names) out.push_back(ops_a::Required(n));
  return out;
}

OpInfo OptimizerInfo(const std::string& type, const std::string& doc, const std::vector<std::string>& inputs,
                     const std::vector<std::string>& outputs,
                     std::vector<std::pair<std::string, std::string>> inplace) {
  OpInfo op;
  op.type = type;
  op.doc = doc + "; Grad is first multiplied by GradScale when given (clip_by_global_norm's Scale) and clamped to "
                 "[grad_clip_min, grad_clip_max]";
  op.inputs = Slots(inputs);
  op.inputs.push_back(ops_a::Optional("GradScale"));  // GradClip's factor
  op.outputs = Slots(outputs);
  op.inplace = std::move(inplace);
  op.jit = JitLowering::kOptimizer;
  // Optimizers are not differentiable: no gradient flows through any input.
  op.no_grad_inputs = inputs;
  op.no_grad_inputs.push_back("GradScale");
  return op;
}

// g + coeff * p inside the fused update (L2Grad's form); nothing emitted at 0.
EwValue EwL2Grad(EwProgram& p, EwValue g, EwValue param, float coeff) {
  return coeff == 0.f ? g : p.Fma(p.Const(coeff), param, g);
}

// GradClip's form: reads the [1] GradScale after a fragment's other reads
// when the op has one; emits nothing for what the op does not clip.
class EwGradClip {
 public:
  EwGradClip(const EwOpView& v, EwFragment& f)
      : lo_(v.Attr<float>("grad_clip_min")), hi_(v.Attr<float>("grad_clip_max")) {
    const std::string scale = v.In("GradScale");
    if (scale.empty()) return;
    scale_read_ = static_cast<int>(f.reads.size());
    f.reads.push_back(EwOpView::Scalar(scale, f.iter.size()));
  }
  EwValue operator()(EwProgram& p, const std::vector<EwValue>& in, EwValue g) const {
    if (scale_read_ >= 0) g = p.Mul(g, in[scale_read_]);
    if (lo_ != -kInf) g = p.Max(g, p.Const(lo_));
    if (hi_ != kInf) g = p.Min(g, p.Const(hi_));
    return g;
  }

 private:
  static constexpr float kInf = std::numeric_limits<float>::infinity();
  float lo_, hi_;
  int scale_read_ = -1;
};

// The JIT's form of the updates (EwProgram fragments over Param's dims; the
// [1] learning rate and beta powers are read at every point).
std::vector<EwFragment> EwSgd(const EwOpView& v) {
  EwFragment f;
  f.iter = v.DimsOf(v.In("Param"));
  f.reads = {v.Full(v.In("Param")), v.Full(v.In("Grad")), EwOpView::Scalar(v.In("LearningRate"), f.iter.size())};
  f.writes = {v.Full(v.Out("ParamOut"))};
  const float l2 = v.Attr<float>("regularization_coeff");
  const EwGradClip clip(v, f);
  f.emit = [l2, clip](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{p.Sub(in[0], p.Mul(in[2], EwL2Grad(p, clip(p, in, in[1]), in[0], l2)))};
  };
  return {f};
}

std::vector<EwFragment> EwMomentum(const EwOpView& v) {
  EwFragment f;
  f.iter = v.DimsOf(v.In("Param"));
  f.reads = {v.Full(v.In("Param")), v.Full(v.In("Grad")), v.Full(v.In("Velocity")),
             EwOpView::Scalar(v.In("LearningRate"), f.iter.size())};
  f.writes = {v.Full(v.Out("ParamOut")), v.Full(v.Out("VelocityOut"))};
  const float mu = v.Attr<float>("mu");
  const bool nesterov = v.Attr<bool>("use_nesterov");
  const float l2 = v.Attr<float>("regularization_coeff");
  const EwGradClip clip(v, f);
  f.emit = [mu, nesterov, l2, clip](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue g = EwL2Grad(p, clip(p, in, in[1]), in[0], l2);
    const EwValue vel = p.Fma(p.Const(mu), in[2], g);
    const EwValue step = nesterov ? p.Fma(p.Const(mu), vel, g) : vel;
    return std::vector<EwValue>{p.Sub(in[0], p.Mul(in[3], step)), vel};
  };
  return {f};
}

// Two fragments: the parameter-sized update, and the [1]-sized advance of the
// beta powers (which the JIT runs after every update of the cluster, so that
// those of all parameters share one kernel). adam's L2 (l2) and adamw's
// decoupled decay (decay) are emitted into the parameter-sized fragment.
std::vector<EwFragment> EwAdamStep(const EwOpView& v, float l2, float decay) {
  EwFragment f;
  f.iter = v.DimsOf(v.In("Param"));
  const size_t r = f.iter.size();
  const std::string b1p = v.In("Beta1Pow"), b2p = v.In("Beta2Pow");
  f.reads = {v.Full(v.In("Param")),           v.Full(v.In("Grad")),         v.Full(v.In("Moment1")),
             v.Full(v.In("Moment2")),         EwOpView::Scalar(v.In("LearningRate"), r),
             EwOpView::Scalar(b1p, r),        EwOpView::Scalar(b2p, r)};
  f.writes = {v.Full(v.Out("ParamOut")), v.Full(v.Out("Moment1Out")), v.Full(v.Out("Moment2Out"))};
  const float beta1 = v.Attr<float>("beta1"), beta2 = v.Attr<float>("beta2"), eps = v.Attr<float>("epsilon");
  const EwGradClip clip(v, f);
  f.emit = [beta1, beta2, eps, l2, decay, clip](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue g = EwL2Grad(p, clip(p, in, in[1]), in[0], l2);
    const EwValue m = p.Fma(p.Const(beta1), in[2], p.Mul(p.Const(1.f - beta1), g));
    const EwValue vv = p.Fma(p.Const(beta2), in[3], p.Mul(p.Const(1.f - beta2), p.Mul(g, g)));
    const EwValue c2 = p.Sqrt(p.Sub(p.Const(1.f), in[6]));  // sqrt(1 - beta2^t)
    const EwValue lr_t = p.Div(p.Mul(in[4], c2), p.Sub(p.Const(1.f), in[5]));
    const EwValue denom = p.Fma(p.Const(eps), c2, p.Sqrt(vv));
    // p * (1 - lr * coeff): the decay uses the plain learning rate, not lr_t.
    const EwValue param = decay == 0.f ? in[0] : p.Mul(in[0], p.Sub(p.Const(1.f), p.Mul(in[4], p.Const(decay))));
    return std::vector<EwValue>{p.Sub(param, p.Div(p.Mul(lr_t, m), denom)), m, vv};
  };
  EwFragment pows;
  pows.iter = v.DimsOf(b1p);
  pows.reads = {v.Full(b1p), v.Full(b2p)};
  pows.writes = {v.Full(v.Out("Beta1PowOut")), v.Full(v.Out("Beta2PowOut"))};
  pows.emit = [beta1, beta2](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{p.Mul(in[0], p.Const(beta1)), p.Mul(in[1], p.Const(beta2))};
  };
  return {f, pows};
}

std::vector<EwFragment> EwAdam(const EwOpView& v) { return EwAdamStep(v, v.Attr<float>("regularization_coeff"), 0.f); }
std::vector<EwFragment> EwAdamW(const EwOpView& v) { return EwAdamStep(v, 0.f, v.Attr<float>("coeff")); }

// The attribute every update op but adamw takes for Paddle's L2Decay.
AttrDef L2Attr() { return {"regularization_coeff", AttrKind::kFloat, Attribute(0.f)}; }

// ClipGradByValue's bounds, which every update op takes (GradClip).
std::vector<AttrDef> ClipAttrs() {
  const float inf = std::numeric_limits<float>::infinity();
  return {{"grad_clip_min", AttrKind::kFloat, Attribute(-inf)}, {"grad_clip_max", AttrKind::kFloat, Attribute(inf)}};
}

std::vector<AttrDef> WithClipAttrs(std::vector<AttrDef> attrs) {
  for (AttrDef& a : ClipAttrs()) attrs.push_back(std::move(a));
  return attrs;
}

// adam and adamw: the same slots, shapes and beta/epsilon attributes; they
// differ in the weight-decay attribute (`decay`) and their kernels.
OpInfo AdamLikeInfo(const std::string& type, const std::string& doc, AttrDef decay) {
  OpInfo op = OptimizerInfo(type, doc, {"Param", "Grad", "Moment1", "Moment2", "LearningRate", "Beta1Pow", "Beta2Pow"},
                            {"ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"},
                            {{"Param", "ParamOut"},
                             {"Moment1", "Moment1Out"},
                             {"Moment2", "Moment2Out"},
                             {"Beta1Pow", "Beta1PowOut"},
                             {"Beta2Pow", "Beta2PowOut"}});
  op.attrs = WithClipAttrs({{"beta1", AttrKind::kFloat, Attribute(0.9f)},
                            {"beta2", AttrKind::kFloat, Attribute(0.999f)},
                            {"epsilon", AttrKind::kFloat, Attribute(1e-8f)},
                            std::move(decay)});
  op.infer_shape = InferAdam;
  return op;
}

}  // namespace

void RegisterOptimizerOps(OpRegistry& r) {
  {
    OpInfo op = OptimizerInfo("sgd", "ParamOut = Param - LearningRate * (Grad + regularization_coeff * Param)",
                              {"Param", "Grad", "LearningRate"}, {"ParamOut"}, {{"Param", "ParamOut"}});
    op.attrs = WithClipAttrs({L2Attr()});
    op.infer_shape = [](InferShapeContext& ctx) { InferParamLike(ctx, {"Grad"}, {"LearningRate"}); };
    op.reference_kernel = SgdKernel;
    op.elementwise = EwSgd;
    r.Add(WithApplyGate(std::move(op)));
  }
  {
    OpInfo op = OptimizerInfo("momentum",
                              "g += regularization_coeff * p; v = mu * v + g; p -= lr * v (nesterov: p -= lr * (g + mu "
                              "* v))",
                              {"Param", "Grad", "Velocity", "LearningRate"}, {"ParamOut", "VelocityOut"},
                              {{"Param", "ParamOut"}, {"Velocity", "VelocityOut"}});
    op.attrs = WithClipAttrs({{"mu", AttrKind::kFloat, Attribute(0.9f)},
                              {"use_nesterov", AttrKind::kBool, Attribute(false)},
                              L2Attr()});
    op.infer_shape = [](InferShapeContext& ctx) { InferParamLike(ctx, {"Grad", "Velocity"}, {"LearningRate"}); };
    op.reference_kernel = MomentumKernel;
    op.elementwise = EwMomentum;
    r.Add(WithApplyGate(std::move(op)));
  }
  {
    OpInfo op = AdamLikeInfo("adam",
                             "Adam step with bias correction (g += regularization_coeff * p first); Beta1Pow/Beta2Pow "
                             "hold beta^t and are advanced",
                             L2Attr());
    op.reference_kernel = AdamKernel;
    op.elementwise = EwAdam;
    r.Add(WithApplyGate(std::move(op)));
  }
  {
    OpInfo op = AdamLikeInfo("adamw",
                             "AdamW: p *= 1 - LearningRate * coeff (decoupled weight decay, as PyTorch's AdamW), then "
                             "adam's step",
                             {"coeff", AttrKind::kFloat, Attribute(0.01f)});
    op.reference_kernel = AdamWKernel;
    op.elementwise = EwAdamW;
    r.Add(WithApplyGate(std::move(op)));
  }
}

}  // namespace kiln
