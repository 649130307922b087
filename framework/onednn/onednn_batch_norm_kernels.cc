#include "framework/onednn/onednn_batch_norm_kernels.h"

#include <cmath>

#include "framework/onednn/batch_norm_handler.h"

namespace kiln {
namespace {

using onednn::AllFp32;
using onednn::BatchNormHandler;
using onednn::PrimitiveCache;

// X [N, C, ...] as oneDNN's [n, c, s, 1].
struct Split {
  int64_t n = 0, c = 0, s = 1;
};

Split SplitOf(const Tensor& x) {
  Split v;
  if (x.rank() < 2) return v;
  v.n = x.dim(0);
  v.c = x.dim(1);
  for (size_t d = 2; d < x.rank(); ++d) v.s *= x.dim(d);
  return v;
}

// SavedMean = mean; SavedVariance = 1/sqrt(var + eps) (the reference's contract).
void WriteSaved(ExecContext& ctx, const Tensor& mean, const Tensor& var, double eps) {
  const int64_t c = mean.numel();
  if (Tensor* saved = ctx.OutputOrNull("SavedMean")) {
    const float* m = mean.data<float>();
    float* out = saved->mutable_data<float>();
    // SavedMean may be Mean itself only in a contrived program; copy by element.
    for (int64_t ch = 0; ch < c; ++ch) out[ch] = m[ch];
  }
  if (Tensor* saved = ctx.OutputOrNull("SavedVariance")) {
    const float* v = var.data<float>();
    float* out = saved->mutable_data<float>();
    for (int64_t ch = 0; ch < c; ++ch) out[ch] = static_cast<float>(1.0 / std::sqrt(v[ch] + eps));
  }
}

// running = momentum * running + (1 - momentum) * batch, the variance with
// the unbiased batch variance (oneDNN's is biased: times m / (m - 1)).
// Without batch statistics (is_test) the running ones pass through.
// MeanOut/VarianceOut are usually Mean/Variance: read before written.
void UpdateRunning(ExecContext& ctx, const Tensor* batch_mean, const Tensor* batch_var, int64_t m) {
  const double momentum = ctx.Attr<float>("momentum");
  const Tensor& mean = ctx.Input("Mean");
  const float* old_mean = mean.data<float>();
  const float* old_var = ctx.Input("Variance").data<float>();
  Tensor* mean_t = ctx.OutputOrNull("MeanOut");
  Tensor* var_t = ctx.OutputOrNull("VarianceOut");
  float* mean_out = mean_t ? mean_t->mutable_data<float>() : nullptr;
  float* var_out = var_t ? var_t->mutable_data<float>() : nullptr;
  const float* bm = batch_mean ? batch_mean->data<float>() : nullptr;
  const float* bv = batch_var ? batch_var->data<float>() : nullptr;
  for (int64_t ch = 0; ch < mean.numel(); ++ch) {
    const float om = old_mean[ch], ov = old_var[ch];
    if (mean_out) mean_out[ch] = bm ? static_cast<float>(momentum * om + (1 - momentum) * bm[ch]) : om;
    if (var_out) {
      var_out[ch] =
          bv ? static_cast<float>(momentum * ov + (1 - momentum) * (static_cast<double>(bv[ch]) * m / (m - 1))) : ov;
    }
  }
}

bool BatchNormKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& scale = ctx.Input("Scale");
  const Tensor& bias = ctx.Input("Bias");
  const Tensor& mean = ctx.Input("Mean");
  const Tensor& var = ctx.Input("Variance");
  if (!AllFp32({&x, &scale, &bias, &mean, &var})) return false;
  const Split v = SplitOf(x);
  const float eps = ctx.Attr<float>("epsilon");
  const bool is_test = ctx.Attr<bool>("is_test");
  BatchNormHandler h(PrimitiveCache::Global(), ctx.onednn(), v.n, v.c, v.s, eps, is_test);
  Tensor* y = ctx.Output("Y");
  if (is_test) {
    if (!h.RunInference(x, scale, bias, mean, var, y)) return false;
    WriteSaved(ctx, mean, var, eps);
    UpdateRunning(ctx, nullptr, nullptr, 0);
    return true;
  }
  Tensor batch_mean(DataType::kFP32, {v.c}), batch_var(DataType::kFP32, {v.c});
  if (!h.RunTraining(x, scale, bias, y, &batch_mean, &batch_var)) return false;
  UpdateRunning(ctx, &batch_mean, &batch_var, v.n * v.s);
  WriteSaved(ctx, batch_mean, batch_var, eps);
  return true;
}

// The statistics the forward normalised with, as oneDNN wants them (mean and
// variance): the running ones for is_test, else SavedMean and the variance
// behind SavedVariance = 1/sqrt(var + eps). False when neither is there (the
// reference kernel recomputes them).
bool UsedStatistics(const ExecContext& ctx, Tensor* mean, Tensor* var) {
  const double eps = ctx.Attr<float>("epsilon");
  const Tensor* rm = ctx.InputOrNull("Mean");
  const Tensor* rv = ctx.InputOrNull("Variance");
  if (ctx.Attr<bool>("is_test") && rm != nullptr && rv != nullptr) {
    if (!AllFp32({rm, rv})) return false;
    *mean = *rm;
    *var = *rv;
    return true;
  }
  const Tensor* sm = ctx.InputOrNull("SavedMean");
  const Tensor* sv = ctx.InputOrNull("SavedVariance");
  if (sm == nullptr || sv == nullptr || !AllFp32({sm, sv})) return false;
  *mean = *sm;
  *var = Tensor(DataType::kFP32, sv->dims());
  const float* r = sv->data<float>();
  float* out = var->mutable_data<float>();
  // 1/r^2 - eps, in double: oneDNN adds eps back, so var + eps is 1/r^2
  // within float rounding.
  for (int64_t ch = 0; ch < sv->numel(); ++ch) {
    const double rr = r[ch];
    out[ch] = static_cast<float>(1.0 / (rr * rr) - eps);
  }
  return true;
}

bool BatchNormGradKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& scale = ctx.Input("Scale");
  const Tensor* dy = ctx.InputOrNull("Y@GRAD");
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  Tensor* dscale = ctx.OutputOrNull("Scale@GRAD");
  Tensor* dbias = ctx.OutputOrNull("Bias@GRAD");
  if (dy == nullptr || (dx == nullptr && dscale == nullptr && dbias == nullptr)) return false;
  if (!AllFp32({&x, &scale, dy})) return false;
  Tensor mean, var;
  if (!UsedStatistics(ctx, &mean, &var)) return false;
  const Split v = SplitOf(x);
  BatchNormHandler h(PrimitiveCache::Global(), ctx.onednn(), v.n, v.c, v.s, ctx.Attr<float>("epsilon"),
                     ctx.Attr<bool>("is_test"));
  return h.RunBackward(x, scale, mean, var, *dy, dx, dscale, dbias);
}

}  // namespace

std::vector<std::pair<std::string, OneDnnKernelFn>> BatchNormOneDnnKernels() {
  return {{"batch_norm", BatchNormKernel}, {"batch_norm_grad", BatchNormGradKernel}};
}

}  // namespace kiln
