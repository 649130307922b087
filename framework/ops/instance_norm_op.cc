// instance_norm and its grad (Paddle's slots): each (sample, channel) of X
// [N, C, ...] normalised over its spatial elements with its own mean and
// biased variance, then scaled and shifted per channel. The grad recomputes
// the statistics from X (as cheap as reading them), so it needs neither
// SavedMean nor SavedVariance. Sums run in double. JIT: framework.
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// X as [N, C, M]: M the product of the spatial dims (-1 when unknown).
struct Split {
  int64_t n, c, m;
};

Split SplitOf(const InferShapeContext& ctx, const Dims& x) {
  if (x.size() < 2) ctx.Fail("input X: expected rank >= 2 ([N, C, ...]), got ", DimsToString(x));
  return {x[0], x[1], ops_b::ProdOrUnknown(x, 2, x.size())};
}

Split SplitOf(const Dims& x) { return {x[0], x[1], Numel(x) == 0 ? 0 : Numel(x) / (x[0] * x[1])}; }

void CheckPerChannel(const InferShapeContext& ctx, const char* slot, DataType dtype, int64_t c) {
  if (!ctx.HasInput(slot)) return;
  ops_b::CheckSameDtype(ctx, slot, dtype, "X");
  const Dims d = ctx.InputDims(slot);
  if (d.size() != 1 || !DimCompatible(d[0], c)) {
    ctx.Fail("input ", slot, ": expected dims [", c, "] (X's channels, dim 1 of ", DimsToString(ctx.InputDims("X")),
             "), got ", DimsToString(d));
  }
}

void InferInstanceNorm(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const Split s = SplitOf(ctx, x);
  CheckPerChannel(ctx, "Scale", dtype, s.c);
  CheckPerChannel(ctx, "Bias", dtype, s.c);
  ctx.SetOutput("Y", x, dtype);
  const int64_t nc = s.n < 0 || s.c < 0 ? -1 : s.n * s.c;
  if (ctx.HasOutput("SavedMean")) ctx.SetOutput("SavedMean", {nc}, dtype);
  if (ctx.HasOutput("SavedVariance")) ctx.SetOutput("SavedVariance", {nc}, dtype);
}

// Mean and 1/sqrt(biased variance + epsilon) of group g (M elements from p).
template <typename T>
void Stats(const T* p, int64_t m, double epsilon, double* mean, double* inv_std) {
  double sum = 0;
  for (int64_t k = 0; k < m; ++k) sum += p[k];
  *mean = m > 0 ? sum / static_cast<double>(m) : 0.0;
  double sq = 0;
  for (int64_t k = 0; k < m; ++k) sq += (p[k] - *mean) * (p[k] - *mean);
  *inv_std = 1.0 / std::sqrt((m > 0 ? sq / static_cast<double>(m) : 0.0) + epsilon);
}

void InstanceNormKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor* scale = ctx.InputOrNull("Scale");
  const Tensor* bias = ctx.InputOrNull("Bias");
  const Split s = SplitOf(x.dims());
  const double eps = ctx.Attr<float>("epsilon");
  Tensor* y = ctx.Output("Y");
  Tensor* saved_mean = ctx.OutputOrNull("SavedMean");
  Tensor* saved_var = ctx.OutputOrNull("SavedVariance");
  ops_b::DispatchFloat(ctx, "X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y->mutable_data<T>();
    T* mp = saved_mean ? saved_mean->mutable_data<T>() : nullptr;
    T* vp = saved_var ? saved_var->mutable_data<T>() : nullptr;
    for (int64_t g = 0; g < s.n * s.c; ++g) {
      const int64_t c = g % s.c;
      double mean, inv;
      Stats(xp + g * s.m, s.m, eps, &mean, &inv);
      const double a = inv * (scale ? static_cast<double>(scale->data<T>()[c]) : 1.0);
      const double b = bias ? static_cast<double>(bias->data<T>()[c]) : 0.0;
      for (int64_t k = 0; k < s.m; ++k) yp[g * s.m + k] = static_cast<T>((xp[g * s.m + k] - mean) * a + b);
      if (mp) mp[g] = static_cast<T>(mean);
      if (vp) vp[g] = static_cast<T>(inv);
    }
  });
}

void InferInstanceNormGrad(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const Split s = SplitOf(ctx, x);
  CheckPerChannel(ctx, "Scale", dtype, s.c);
  const std::string dy = GradVarName("Y");
  if (!ctx.HasInput(dy)) ctx.Fail("input ", dy, " is required (it gives X@GRAD its values)");
  ops_b::CheckSameDtype(ctx, dy, dtype, "X");
  if (!DimsCompatible(ctx.InputDims(dy), x)) {
    ctx.Fail("input ", dy, ": expected dims ", DimsToString(x), " (as X), got ", DimsToString(ctx.InputDims(dy)));
  }
  ctx.SetOutput(GradVarName("X"), x, dtype);
  ctx.SetOutput(GradVarName("Scale"), {s.c}, dtype);
  ctx.SetOutput(GradVarName("Bias"), {s.c}, dtype);
}

// Per group, with xhat = (x - mean) * inv_std and dxhat = dY * scale:
// dX = inv_std * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat));
// dScale[c] and dBias[c] sum dY * xhat and dY over the channel's groups.
void InstanceNormGradKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor* scale = ctx.InputOrNull("Scale");
  const Tensor& dy = ctx.Input(GradVarName("Y"));
  const Split s = SplitOf(x.dims());
  const double eps = ctx.Attr<float>("epsilon");
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  Tensor* dscale = ctx.OutputOrNull(GradVarName("Scale"));
  Tensor* dbias = ctx.OutputOrNull(GradVarName("Bias"));
  ops_b::DispatchFloat(ctx, "X", [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *gp = dy.data<T>();
    std::vector<double> ds(static_cast<size_t>(s.c), 0.0), db(ds.size(), 0.0);
    T* dxp = dx ? dx->mutable_data<T>() : nullptr;
    for (int64_t g = 0; g < s.n * s.c; ++g) {
      const int64_t c = g % s.c, base = g * s.m;
      const double sc = scale ? static_cast<double>(scale->data<T>()[c]) : 1.0;
      double mean, inv;
      Stats(xp + base, s.m, eps, &mean, &inv);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t k = 0; k < s.m; ++k) {
        sum_dy += gp[base + k];
        sum_dy_xhat += gp[base + k] * (xp[base + k] - mean) * inv;
      }
      ds[c] += sum_dy_xhat;
      db[c] += sum_dy;
      if (dxp == nullptr) continue;
      const double mean_dxhat = sc * sum_dy / static_cast<double>(s.m);
      const double mean_dxhat_xhat = sc * sum_dy_xhat / static_cast<double>(s.m);
      for (int64_t k = 0; k < s.m; ++k) {
        const double xhat = (xp[base + k] - mean) * inv;
        dxp[base + k] = static_cast<T>(inv * (sc * gp[base + k] - mean_dxhat - xhat * mean_dxhat_xhat));
      }
    }
    auto store = [](Tensor* t, const std::vector<double>& v) {
      if (t == nullptr) return;
      T* p = t->mutable_data<T>();
      for (size_t c = 0; c < v.size(); ++c) p[c] = static_cast<T>(v[c]);
    };
    store(dscale, ds);
    store(dbias, db);
  });
}

}  // namespace

void RegisterInstanceNormOps(OpRegistry& r) {
  const std::vector<AttrDef> attrs = {{"epsilon", AttrKind::kFloat, Attribute(1e-5f)}};
  OpInfo op;
  op.type = "instance_norm";
  op.doc =
      "Y = (X - mean) / sqrt(var + epsilon) * Scale[c] + Bias[c], mean and the biased variance taken per sample "
      "and channel over the spatial dims of X [N, C, ...] (rank >= 2; ONNX InstanceNormalization). Scale and "
      "Bias ([C]) may be absent (1 and 0). SavedMean and SavedVariance ([N*C], optional) hold each group's mean "
      "and 1/sqrt(var + epsilon), as Paddle's. JIT: framework";
  op.inputs = {{"X"}, {"Scale", false, true}, {"Bias", false, true}};
  op.outputs = {{"Y"}, {"SavedMean", false, true}, {"SavedVariance", false, true}};
  op.attrs = attrs;
  op.infer_shape = InferInstanceNorm;
  op.reference_kernel = InstanceNormKernel;
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"X", "Scale"}, {}, {"Y"}, {"X", "Scale", "Bias"})};
  };
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "instance_norm_grad";
  grad.doc =
      "Gradients of instance_norm w.r.t. X, Scale and Bias, the statistics recomputed from X: X@GRAD = inv_std * "
      "(dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) per group with dxhat = Y@GRAD * Scale[c]; Scale@GRAD and "
      "Bias@GRAD sum Y@GRAD * xhat and Y@GRAD over N and the spatial dims. JIT: framework";
  grad.inputs = {{"X"}, {"Scale", false, true}, {GradVarName("Y"), false, true}};
  grad.outputs = {{GradVarName("X"), false, true}, {GradVarName("Scale"), false, true}, {GradVarName("Bias"), false, true}};
  grad.attrs = attrs;
  grad.infer_shape = InferInstanceNormGrad;
  grad.reference_kernel = InstanceNormGradKernel;
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

}  // namespace kiln
