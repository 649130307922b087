// sgd, momentum and adam. Outputs normally name the same vars as their inputs
// (ParamOut is Param): every kernel reads scalars first and then updates each
// element from that element alone, so running in place is safe.
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
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

void SgdKernel(ExecContext& ctx) {
  CheckRuntimeSameDims(ctx, {"Grad"});
  const double lr = ops_a::ReadScalar(ctx, "LearningRate");
  const Tensor& param = ctx.Input("Param");
  const Tensor& grad = ctx.Input("Grad");
  Tensor* param_out = ctx.Output("ParamOut");
  ops_a::DispatchFloat(ctx, param.dtype(), "input Param", [&](auto tag) {
    using T = decltype(tag);
    const T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* po = param_out->mutable_data<T>();
    const T lr_t = static_cast<T>(lr);
    for (int64_t i = 0; i < param.numel(); ++i) po[i] = p[i] - lr_t * g[i];
  });
}

void MomentumKernel(ExecContext& ctx) {
  CheckRuntimeSameDims(ctx, {"Grad", "Velocity"});
  const double lr = ops_a::ReadScalar(ctx, "LearningRate");
  const double mu = ctx.Attr<float>("mu");
  const bool nesterov = ctx.Attr<bool>("use_nesterov");
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
    for (int64_t i = 0; i < param.numel(); ++i) {
      const T v_new = mu_t * v[i] + g[i];
      const T step = nesterov ? g[i] + mu_t * v_new : v_new;
      vo[i] = v_new;
      po[i] = p[i] - lr_t * step;
    }
  });
}

void AdamKernel(ExecContext& ctx) {
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
    for (int64_t i = 0; i < param.numel(); ++i) {
      const T m = b1 * m1[i] + c1 * g[i];
      const T v = b2 * m2[i] + c2 * g[i] * g[i];
      m1o[i] = m;
      m2o[i] = v;
      po[i] = p[i] - lr_c * m / (std::sqrt(v) + eps_c);
    }
  });
  ops_a::WriteScalar(ctx.Output("Beta1PowOut"), b1_pow_dtype, b1_pow * beta1);
  ops_a::WriteScalar(ctx.Output("Beta2PowOut"), b2_pow_dtype, b2_pow * beta2);
}

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
  op.doc = doc;
  op.inputs = Slots(inputs);
  op.outputs = Slots(outputs);
  op.inplace = std::move(inplace);
  op.jit = JitLowering::kOptimizer;
  // Optimizers are not differentiable: no gradient flows through any input.
  op.no_grad_inputs = inputs;
  return op;
}

}  // namespace

void RegisterOptimizerOps(OpRegistry& r) {
  {
    OpInfo op = OptimizerInfo("sgd", "ParamOut = Param - LearningRate * Grad", {"Param", "Grad", "LearningRate"},
                              {"ParamOut"}, {{"Param", "ParamOut"}});
    op.infer_shape = [](InferShapeContext& ctx) { InferParamLike(ctx, {"Grad"}, {"LearningRate"}); };
    op.reference_kernel = SgdKernel;
    r.Add(std::move(op));
  }
  {
    OpInfo op = OptimizerInfo("momentum", "v = mu * v + g; p -= lr * v (nesterov: p -= lr * (g + mu * v))",
                              {"Param", "Grad", "Velocity", "LearningRate"}, {"ParamOut", "VelocityOut"},
                              {{"Param", "ParamOut"}, {"Velocity", "VelocityOut"}});
    op.attrs = {{"mu", AttrKind::kFloat, Attribute(0.9f)}, {"use_nesterov", AttrKind::kBool, Attribute(false)}};
    op.infer_shape = [](InferShapeContext& ctx) { InferParamLike(ctx, {"Grad", "Velocity"}, {"LearningRate"}); };
    op.reference_kernel = MomentumKernel;
    r.Add(std::move(op));
  }
  {
    OpInfo op = OptimizerInfo("adam", "Adam step with bias correction; Beta1Pow/Beta2Pow hold beta^t and are advanced",
                              {"Param", "Grad", "Moment1", "Moment2", "LearningRate", "Beta1Pow", "Beta2Pow"},
                              {"ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"},
                              {{"Param", "ParamOut"},
                               {"Moment1", "Moment1Out"},
                               {"Moment2", "Moment2Out"},
                               {"Beta1Pow", "Beta1PowOut"},
                               {"Beta2Pow", "Beta2PowOut"}});
    op.attrs = {{"beta1", AttrKind::kFloat, Attribute(0.9f)},
                {"beta2", AttrKind::kFloat, Attribute(0.999f)},
                {"epsilon", AttrKind::kFloat, Attribute(1e-8f)}};
    op.infer_shape = InferAdam;
    op.reference_kernel = AdamKernel;
    r.Add(std::move(op));
  }
}

}  // namespace kiln
