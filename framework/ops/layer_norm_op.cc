// layer_norm with its grad.
#include <cmath>
#include <utility>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_b::DispatchFloat;

struct NormSplit {
  int64_t left, right;  // rows, row length (-1 when unknown at build time)
};

NormSplit LayerNormSplit(const InferShapeContext& ctx, const Dims& x) {
  const int64_t b = ctx.Attr<int64_t>("begin_norm_axis");
  if (b < 1 || b >= static_cast<int64_t>(x.size())) {
    ctx.Fail("attribute 'begin_norm_axis' must be in [1, ", x.size(), ") for X ", DimsToString(x), ", got ", b);
  }
  return {ops_b::ProdOrUnknown(x, 0, b), ops_b::ProdOrUnknown(x, b, x.size())};
}

void CheckScaleBias(const InferShapeContext& ctx, const char* slot, DataType dtype, int64_t right) {
  if (!ctx.HasInput(slot)) return;
  ops_b::CheckSameDtype(ctx, slot, dtype, "X");
  const Dims d = ctx.InputDims(slot);
  if (d.size() != 1 || !DimCompatible(d[0], right)) {
    ctx.Fail("input ", slot, ": expected dims [", right, "] (the normalised size of X ",
             DimsToString(ctx.InputDims("X")), "), got ", DimsToString(d));
  }
}

void LayerNormInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const NormSplit s = LayerNormSplit(ctx, x);
  CheckScaleBias(ctx, "Scale", dtype, s.right);
  CheckScaleBias(ctx, "Bias", dtype, s.right);
  ctx.SetOutput("Y", x, dtype);
  if (ctx.HasOutput("Mean")) ctx.SetOutput("Mean", {s.left}, dtype);
  if (ctx.HasOutput("Variance")) ctx.SetOutput("Variance", {s.left}, dtype);
}

void LayerNormGradInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const NormSplit s = LayerNormSplit(ctx, x);
  CheckScaleBias(ctx, "Scale", dtype, s.right);
  for (const char* slot : {"Mean", "Variance"}) {
    if (ctx.HasInput(slot) && !DimsCompatible(ctx.InputDims(slot), {s.left})) {
      ctx.Fail("input ", slot, ": expected dims [", s.left, "], got ", DimsToString(ctx.InputDims(slot)));
    }
  }
  if (ctx.HasInput("Y@GRAD") && !DimsCompatible(ctx.InputDims("Y@GRAD"), x)) {
    ctx.Fail("input Y@GRAD: expected dims ", DimsToString(x), ", got ", DimsToString(ctx.InputDims("Y@GRAD")));
  }
  if (ctx.HasOutput("X@GRAD")) ctx.SetOutput("X@GRAD", x, dtype);
  if (ctx.HasOutput("Scale@GRAD")) ctx.SetOutput("Scale@GRAD", {s.right}, dtype);
  if (ctx.HasOutput("Bias@GRAD")) ctx.SetOutput("Bias@GRAD", {s.right}, dtype);
}

// Mean and biased variance of one row, accumulated in double (two passes).
template <typename T>
void RowMoments(const T* x, int64_t n, double* mean, double* var) {
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += x[j];
  const double mu = sum / n;
  double sq = 0;
  for (int64_t j = 0; j < n; ++j) sq += (x[j] - mu) * (x[j] - mu);
  *mean = mu;
  *var = sq / n;
}

std::pair<int64_t, int64_t> RuntimeSplit(const ExecContext& ctx, const Dims& x) {
  const int64_t b = ctx.Attr<int64_t>("begin_norm_axis");
  return {ops_b::ProdOrUnknown(x, 0, b), ops_b::ProdOrUnknown(x, b, x.size())};
}

template <typename T>
void LayerNormKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const auto [left, right] = RuntimeSplit(ctx, xt.dims());
  const double eps = ctx.Attr<float>("epsilon");
  const T* x = xt.data<T>();
  const Tensor* scale_t = ctx.InputOrNull("Scale");
  const Tensor* bias_t = ctx.InputOrNull("Bias");
  const T* scale = scale_t ? scale_t->data<T>() : nullptr;
  const T* bias = bias_t ? bias_t->data<T>() : nullptr;
  T* y = ctx.Output("Y")->mutable_data<T>();
  Tensor* mean_t = ctx.OutputOrNull("Mean");
  Tensor* var_t = ctx.OutputOrNull("Variance");
  T* mean_out = mean_t ? mean_t->mutable_data<T>() : nullptr;
  T* var_out = var_t ? var_t->mutable_data<T>() : nullptr;
  for (int64_t r = 0; r < left; ++r) {
    const T* xr = x + r * right;
    T* yr = y + r * right;
    double mean, var;
    RowMoments(xr, right, &mean, &var);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < right; ++j) {
      double v = (xr[j] - mean) * rstd;
      if (scale) v *= scale[j];
      if (bias) v += bias[j];
      yr[j] = static_cast<T>(v);
    }
    if (mean_out) mean_out[r] = static_cast<T>(mean);
    if (var_out) var_out[r] = static_cast<T>(var);
  }
}

template <typename T>
void LayerNormGradKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const auto [left, right] = RuntimeSplit(ctx, xt.dims());
  const double eps = ctx.Attr<float>("epsilon");
  Tensor* dx_t = ctx.OutputOrNull("X@GRAD");
  Tensor* dscale_t = ctx.OutputOrNull("Scale@GRAD");
  Tensor* dbias_t = ctx.OutputOrNull("Bias@GRAD");
  T* dx = dx_t ? ops_b::ZeroFill<T>(dx_t) : nullptr;
  T* dscale = dscale_t ? ops_b::ZeroFill<T>(dscale_t) : nullptr;
  T* dbias = dbias_t ? ops_b::ZeroFill<T>(dbias_t) : nullptr;
  const Tensor* dy_t = ctx.InputOrNull("Y@GRAD");
  if (dy_t == nullptr) return;
  const T* x = xt.data<T>();
  const T* dy = dy_t->data<T>();
  const Tensor* scale_t = ctx.InputOrNull("Scale");
  const T* scale = scale_t ? scale_t->data<T>() : nullptr;
  // Mean/Variance are optional outputs of the forward op; recompute when absent.
  const Tensor* mean_t = ctx.InputOrNull("Mean");
  const Tensor* var_t = ctx.InputOrNull("Variance");
  std::vector<double> xhat(right), g(right);
  for (int64_t r = 0; r < left; ++r) {
    const T* xr = x + r * right;
    const T* dyr = dy + r * right;
    double mean, var;
    if (mean_t != nullptr && var_t != nullptr) {
      mean = mean_t->data<T>()[r];
      var = var_t->data<T>()[r];
    } else {
      RowMoments(xr, right, &mean, &var);
    }
    const double rstd = 1.0 / std::sqrt(var + eps);
    double g_mean = 0, gx_mean = 0;
    for (int64_t j = 0; j < right; ++j) {
      xhat[j] = (xr[j] - mean) * rstd;
      g[j] = scale ? static_cast<double>(dyr[j]) * scale[j] : dyr[j];
      g_mean += g[j];
      gx_mean += g[j] * xhat[j];
      if (dscale) dscale[j] += static_cast<T>(dyr[j] * xhat[j]);
      if (dbias) dbias[j] += dyr[j];
    }
    if (dx == nullptr) continue;
    g_mean /= right;
    gx_mean /= right;
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale
    for (int64_t j = 0; j < right; ++j) dx[r * right + j] = static_cast<T>(rstd * (g[j] - g_mean - xhat[j] * gx_mean));
  }
}

std::vector<AttrDef> LayerNormAttrs() {
  return {{"epsilon", AttrKind::kFloat, Attribute(1e-5f)}, {"begin_norm_axis", AttrKind::kInt, Attribute(int64_t{1})}};
}

}  // namespace

void RegisterLayerNormOps(OpRegistry& r) {
  OpInfo ln;
  ln.type = "layer_norm";
  ln.doc = "Normalises X over dims >= begin_norm_axis, then scales and shifts by Scale and Bias";
  ln.inputs = {{"X"}, {"Scale", false, true}, {"Bias", false, true}};
  ln.outputs = {{"Y"}, {"Mean", false, true}, {"Variance", false, true}};
  ln.attrs = LayerNormAttrs();
  ln.infer_shape = LayerNormInferShape;
  ln.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { LayerNormKernel<decltype(tag)>(ctx); });
  };
  ln.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{
        MakeGradOp(op, {"X", "Scale"}, {"Mean", "Variance"}, {"Y"}, {"X", "Scale", "Bias"})};
  };
  ln.jit = JitLowering::kOneDnn;
  r.Add(std::move(ln));

  OpInfo ln_grad;
  ln_grad.type = "layer_norm_grad";
  ln_grad.doc = "Gradients of layer_norm w.r.t. X, Scale and Bias";
  ln_grad.inputs = {{"X"},
                    {"Scale", false, true},
                    {"Mean", false, true},
                    {"Variance", false, true},
                    {"Y@GRAD", false, true}};
  ln_grad.outputs = {{"X@GRAD", false, true}, {"Scale@GRAD", false, true}, {"Bias@GRAD", false, true}};
  ln_grad.attrs = LayerNormAttrs();
  ln_grad.infer_shape = LayerNormGradInferShape;
  ln_grad.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { LayerNormGradKernel<decltype(tag)>(ctx); });
  };
  ln_grad.jit = JitLowering::kOneDnn;
  r.Add(std::move(ln_grad));
}

}  // namespace kiln
