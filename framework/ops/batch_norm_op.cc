// batch_norm and batch_norm_grad: per-channel normalisation of X [N, C, ...]
// with PyTorch's training-mode arithmetic (biased batch variance for Y, the
// unbiased one for the running variance).
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_b::DispatchFloat;

// X seen as [n, c, s]: s is the product of the spatial dims (1 for NC).
// Element (i, ch, k) is at (i * c + ch) * s + k; a channel has n * s values.
struct ChannelView {
  int64_t n = 1, c = 1, s = 1;
  int64_t At(int64_t i, int64_t ch, int64_t k) const { return (i * c + ch) * s + k; }
  int64_t PerChannel() const { return n * s; }
};

ChannelView ViewOf(const Dims& x) {
  ChannelView v;
  v.n = x[0];
  v.c = x[1];
  for (size_t d = 2; d < x.size(); ++d) v.s *= x[d];
  return v;
}

// ---- shape inference ------------------------------------------------------------------

// Checks X, the attributes and the [C] inputs shared by the op and its grad;
// returns X's dtype.
DataType CheckCommon(const InferShapeContext& ctx, const std::vector<const char*>& channel_slots) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  if (x.size() < 2 || x.size() > 5) {
    ctx.Fail("input X: expected rank 2 to 5 (N, C, then up to 3 spatial dims: NC, NCL, NCHW, NCDHW), got ",
             DataTypeName(dtype), DimsToString(x));
  }
  const float eps = ctx.Attr<float>("epsilon");
  if (!(eps >= 0.0f) || std::isinf(eps)) ctx.Fail("attribute epsilon: expected a finite value >= 0, got ", eps);
  const float momentum = ctx.Attr<float>("momentum");
  if (!(momentum >= 0.0f && momentum <= 1.0f)) {
    ctx.Fail("attribute momentum: expected a value in [0, 1], got ", momentum);
  }
  for (const char* slot : channel_slots) {
    if (!ctx.HasInput(slot)) continue;
    ops_b::CheckSameDtype(ctx, slot, dtype, "X");
    const Dims d = ctx.InputDims(slot);
    if (d.size() != 1 || !DimCompatible(d[0], x[1])) {
      ctx.Fail("input ", slot, ": expected dims [", x[1], "] (the channels of X ", DimsToString(x), "), got ",
               DimsToString(d));
    }
  }
  return dtype;
}

void BatchNormInferShape(InferShapeContext& ctx) {
  const DataType dtype = CheckCommon(ctx, {"Scale", "Bias", "Mean", "Variance"});
  const Dims x = ctx.InputDims("X");
  if (!ctx.Attr<bool>("is_test")) {
    for (const char* slot : {"MeanOut", "VarianceOut"}) {
      if (!ctx.HasOutput(slot)) ctx.Fail("output ", slot, " is required in training (is_test = false)");
    }
    // The unbiased variance that updates the running one divides by m - 1
    // (PyTorch refuses m = 1 in training too).
    const int64_t numel = ops_b::ProdOrUnknown(x, 0, x.size());
    if (numel >= 0 && x[1] > 0 && numel / x[1] <= 1) {
      ctx.Fail("input X ", DimsToString(x),
               ": training needs more than one value per channel (N * spatial = ", numel / x[1], ")");
    }
  }
  const Dims channels = {x[1]};
  ctx.SetOutput("Y", x, dtype);
  for (const char* slot : {"MeanOut", "VarianceOut", "SavedMean", "SavedVariance"}) {
    if (ctx.HasOutput(slot)) ctx.SetOutput(slot, channels, dtype);
  }
}

void BatchNormGradInferShape(InferShapeContext& ctx) {
  const DataType dtype = CheckCommon(ctx, {"Scale", "Mean", "Variance", "SavedMean", "SavedVariance"});
  const Dims x = ctx.InputDims("X");
  if (ctx.HasInput("Y@GRAD")) {
    ops_b::CheckSameDtype(ctx, "Y@GRAD", dtype, "X");
    if (!DimsCompatible(ctx.InputDims("Y@GRAD"), x)) {
      ctx.Fail("input Y@GRAD: expected dims ", DimsToString(x), " (as X), got ", DimsToString(ctx.InputDims("Y@GRAD")));
    }
  }
  if (ctx.Attr<bool>("is_test") && !(ctx.HasInput("SavedMean") && ctx.HasInput("SavedVariance")) &&
      !(ctx.HasInput("Mean") && ctx.HasInput("Variance"))) {
    ctx.Fail("is_test: inputs Mean and Variance (or SavedMean and SavedVariance) are required");
  }
  if (ctx.HasOutput("X@GRAD")) ctx.SetOutput("X@GRAD", x, dtype);
  if (ctx.HasOutput("Scale@GRAD")) ctx.SetOutput("Scale@GRAD", {x[1]}, dtype);
  if (ctx.HasOutput("Bias@GRAD")) ctx.SetOutput("Bias@GRAD", {x[1]}, dtype);
}

// ---- kernels --------------------------------------------------------------------------

// Mean and biased variance of channel ch, in double (two passes).
template <typename T>
void ChannelMoments(const T* x, const ChannelView& v, int64_t ch, double* mean, double* var) {
  double sum = 0;
  for (int64_t i = 0; i < v.n; ++i) {
    for (int64_t k = 0; k < v.s; ++k) sum += x[v.At(i, ch, k)];
  }
  const double mu = sum / v.PerChannel();
  double sq = 0;
  for (int64_t i = 0; i < v.n; ++i) {
    for (int64_t k = 0; k < v.s; ++k) {
      const double d = x[v.At(i, ch, k)] - mu;
      sq += d * d;
    }
  }
  *mean = mu;
  *var = sq / v.PerChannel();
}

template <typename T>
T* DataOrNull(Tensor* t) {
  return t != nullptr ? t->mutable_data<T>() : nullptr;
}

template <typename T>
void BatchNormKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const ChannelView v = ViewOf(xt.dims());
  const double eps = ctx.Attr<float>("epsilon");
  const double momentum = ctx.Attr<float>("momentum");
  const bool is_test = ctx.Attr<bool>("is_test");
  const T* x = xt.data<T>();
  const T* scale = ctx.Input("Scale").data<T>();
  const T* bias = ctx.Input("Bias").data<T>();
  // MeanOut/VarianceOut are usually Mean/Variance themselves: each channel's
  // running value is read before it is written.
  const T* run_mean = ctx.Input("Mean").data<T>();
  const T* run_var = ctx.Input("Variance").data<T>();
  T* y = ctx.Output("Y")->mutable_data<T>();
  T* mean_out = DataOrNull<T>(ctx.OutputOrNull("MeanOut"));
  T* var_out = DataOrNull<T>(ctx.OutputOrNull("VarianceOut"));
  T* saved_mean = DataOrNull<T>(ctx.OutputOrNull("SavedMean"));
  T* saved_inv_std = DataOrNull<T>(ctx.OutputOrNull("SavedVariance"));
  const int64_t m = v.PerChannel();
  for (int64_t ch = 0; ch < v.c; ++ch) {
    double mean, var;
    if (is_test) {
      mean = run_mean[ch];
      var = run_var[ch];
    } else {
      ChannelMoments(x, v, ch, &mean, &var);
    }
    const double inv_std = 1.0 / std::sqrt(var + eps);
    const double a = inv_std * scale[ch];
    const double b = bias[ch] - mean * a;
    for (int64_t i = 0; i < v.n; ++i) {
      for (int64_t k = 0; k < v.s; ++k) {
        const int64_t at = v.At(i, ch, k);
        y[at] = static_cast<T>(x[at] * a + b);
      }
    }
    if (saved_mean) saved_mean[ch] = static_cast<T>(mean);
    if (saved_inv_std) saved_inv_std[ch] = static_cast<T>(inv_std);
    // is_test passes the running statistics through unchanged.
    const T old_mean = run_mean[ch], old_var = run_var[ch];
    if (mean_out) mean_out[ch] = is_test ? old_mean : static_cast<T>(momentum * old_mean + (1 - momentum) * mean);
    if (var_out) {
      var_out[ch] = is_test ? old_var : static_cast<T>(momentum * old_var + (1 - momentum) * var * m / (m - 1));
    }
  }
}

// The mean and 1/sqrt(var + eps) each channel was normalised with: SavedMean
// and SavedVariance when the forward kept them; otherwise the running
// statistics (is_test) or the batch statistics recomputed from X.
template <typename T>
void UsedStatistics(const ExecContext& ctx, const T* x, const ChannelView& v, std::vector<double>* mean,
                    std::vector<double>* inv_std) {
  const double eps = ctx.Attr<float>("epsilon");
  const Tensor* sm = ctx.InputOrNull("SavedMean");
  const Tensor* sv = ctx.InputOrNull("SavedVariance");
  mean->resize(v.c);
  inv_std->resize(v.c);
  if (sm != nullptr && sv != nullptr) {
    for (int64_t ch = 0; ch < v.c; ++ch) {
      (*mean)[ch] = sm->data<T>()[ch];
      (*inv_std)[ch] = sv->data<T>()[ch];
    }
    return;
  }
  const bool is_test = ctx.Attr<bool>("is_test");
  const T* rm = is_test ? ctx.Input("Mean").data<T>() : nullptr;
  const T* rv = is_test ? ctx.Input("Variance").data<T>() : nullptr;
  for (int64_t ch = 0; ch < v.c; ++ch) {
    double mu, var;
    if (is_test) {
      mu = rm[ch];
      var = rv[ch];
    } else {
      ChannelMoments(x, v, ch, &mu, &var);
    }
    (*mean)[ch] = mu;
    (*inv_std)[ch] = 1.0 / std::sqrt(var + eps);
  }
}

template <typename T>
void BatchNormGradKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const ChannelView v = ViewOf(xt.dims());
  T* dx = DataOrNull<T>(ctx.OutputOrNull("X@GRAD"));
  T* dscale = DataOrNull<T>(ctx.OutputOrNull("Scale@GRAD"));
  T* dbias = DataOrNull<T>(ctx.OutputOrNull("Bias@GRAD"));
  const Tensor* dy_t = ctx.InputOrNull("Y@GRAD");
  if (dy_t == nullptr) {  // no gradient flows into Y: zeros
    for (Tensor* t : {ctx.OutputOrNull("X@GRAD"), ctx.OutputOrNull("Scale@GRAD"), ctx.OutputOrNull("Bias@GRAD")}) {
      if (t != nullptr) ops_b::ZeroFill<T>(t);
    }
    return;
  }
  const T* x = xt.data<T>();
  const T* dy = dy_t->data<T>();
  const T* scale = ctx.Input("Scale").data<T>();
  const bool is_test = ctx.Attr<bool>("is_test");
  std::vector<double> mean, inv_std;
  UsedStatistics(ctx, x, v, &mean, &inv_std);
  const double m = static_cast<double>(v.PerChannel());
  for (int64_t ch = 0; ch < v.c; ++ch) {
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = 0; i < v.n; ++i) {
      for (int64_t k = 0; k < v.s; ++k) {
        const int64_t at = v.At(i, ch, k);
        sum_dy += dy[at];
        sum_dy_xhat += dy[at] * (x[at] - mean[ch]) * inv_std[ch];
      }
    }
    if (dscale) dscale[ch] = static_cast<T>(sum_dy_xhat);
    if (dbias) dbias[ch] = static_cast<T>(sum_dy);
    if (dx == nullptr) continue;
    const double g = scale[ch] * inv_std[ch];
    // Training: the batch statistics depend on X, so
    //   dx = g * (dy - mean(dy) - xhat * mean(dy * xhat));
    // is_test: the running statistics are constants, dx = g * dy.
    const double mean_dy = is_test ? 0.0 : sum_dy / m;
    const double mean_dy_xhat = is_test ? 0.0 : sum_dy_xhat / m;
    for (int64_t i = 0; i < v.n; ++i) {
      for (int64_t k = 0; k < v.s; ++k) {
        const int64_t at = v.At(i, ch, k);
        const double xhat = (x[at] - mean[ch]) * inv_std[ch];
        dx[at] = static_cast<T>(g * (dy[at] - mean_dy - xhat * mean_dy_xhat));
      }
    }
  }
}

std::vector<AttrDef> BatchNormAttrs() {
  return {{"epsilon", AttrKind::kFloat, Attribute(1e-5f)},
          {"momentum", AttrKind::kFloat, Attribute(0.9f)},
          {"is_test", AttrKind::kBool, Attribute(false)}};
}

constexpr const char* kBatchNormDoc =
    "Normalises each channel (dim 1) of X [N, C, ...] (NC, NCL, NCHW, NCDHW), then Y = Scale * xhat + Bias. "
    "Training: xhat uses the batch mean and the biased batch variance (divided by N*spatial, as PyTorch), and "
    "the running statistics are updated in place (MeanOut is Mean, VarianceOut is Variance): "
    "running = momentum * running + (1 - momentum) * batch, where the running variance takes the UNBIASED "
    "batch variance (divided by N*spatial - 1, as PyTorch; PyTorch's momentum is 1 - this one). "
    "is_test: xhat uses Mean and Variance, which are not updated. SavedMean and SavedVariance hold the mean "
    "and the inverse standard deviation 1/sqrt(var + epsilon) Y was normalised with (batch statistics in "
    "training, running ones in is_test), for the grad";

}  // namespace

void RegisterBatchNormOps(OpRegistry& r) {
  OpInfo bn;
  bn.type = "batch_norm";
  bn.doc = kBatchNormDoc;
  bn.inputs = {{"X"}, {"Scale"}, {"Bias"}, {"Mean"}, {"Variance"}};
  bn.outputs = {{"Y"},
                {"MeanOut", false, true},
                {"VarianceOut", false, true},
                {"SavedMean", false, true},
                {"SavedVariance", false, true}};
  bn.attrs = BatchNormAttrs();
  bn.infer_shape = BatchNormInferShape;
  bn.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { BatchNormKernel<decltype(tag)>(ctx); });
  };
  bn.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X", "Scale", "Mean", "Variance"}, {"SavedMean", "SavedVariance"},
                                                 {"Y"}, {"X", "Scale", "Bias"})};
  };
  bn.inplace = {{"Mean", "MeanOut"}, {"Variance", "VarianceOut"}};
  // Running statistics are state, not differentiable inputs.
  bn.no_grad_inputs = {"Mean", "Variance"};
  bn.jit = JitLowering::kOneDnn;
  r.Add(std::move(bn));

  OpInfo grad;
  grad.type = "batch_norm_grad";
  grad.doc =
      "Gradients of batch_norm w.r.t. X, Scale and Bias. Training: through the batch statistics; is_test: the "
      "running statistics are constants (dX = dY * Scale / sqrt(Variance + epsilon)). Mean and Variance get no "
      "gradient";
  grad.inputs = {{"X"},
                 {"Scale"},
                 {"Mean", false, true},
                 {"Variance", false, true},
                 {"SavedMean", false, true},
                 {"SavedVariance", false, true},
                 {"Y@GRAD", false, true}};
  grad.outputs = {{"X@GRAD", false, true}, {"Scale@GRAD", false, true}, {"Bias@GRAD", false, true}};
  grad.attrs = BatchNormAttrs();
  grad.infer_shape = BatchNormGradInferShape;
  grad.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { BatchNormGradKernel<decltype(tag)>(ctx); });
  };
  grad.jit = JitLowering::kOneDnn;
  r.Add(std::move(grad));
}

}  // namespace kiln
