// nll_loss (Paddle's) and its grad: the negative log-likelihood of the
// labelled class, -Weight[label] * X[n, label, d...], with an ignored label
// value and none/sum/mean reductions (mean divides by the summed weights of
// the labels not ignored, as torch.nn.NLLLoss and ONNX
// NegativeLogLikelihoodLoss). Sums run in double. JIT: framework.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

enum class Reduction { kNone, kSum, kMean };

// X as [N, C, M] (M the product of the dims after C; 1 for [N, C]).
struct NllLayout {
  int64_t n = 0, c = 0, m = 1;
};

template <typename Ctx>
Reduction ReductionOf(const Ctx& ctx) {
  const std::string& r = ctx.template Attr<std::string>("reduction");
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  if (r != "mean") ctx.Fail("attribute reduction: expected \"none\", \"sum\" or \"mean\", got \"", r, "\"");
  return Reduction::kMean;
}

// Checks X, Label and Weight; returns Label's dims ([N, d...]) and X's dtype.
Dims CheckInputs(const InferShapeContext& ctx, DataType* dtype) {
  *dtype = ops_b::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  if (x.size() < 2) ctx.Fail("input X: expected rank >= 2 ([N, C] or [N, C, d1, ...]), got ", DimsToString(x));
  ops::CheckInputDtype(ctx, "Label", {DataType::kINT64, DataType::kINT32});
  Dims want = {x[0]};
  want.insert(want.end(), x.begin() + 2, x.end());
  const Dims label = ctx.InputDims("Label");
  if (!DimsCompatible(label, want)) {
    ctx.Fail("input Label: expected dims ", DimsToString(want), " (X ", DimsToString(x),
             " without its class dim 1), got ", DimsToString(label));
  }
  if (ctx.HasInput("Weight")) {
    ops_b::CheckSameDtype(ctx, "Weight", *dtype, "X");
    const Dims w = ctx.InputDims("Weight");
    if (w.size() != 1 || !DimCompatible(w[0], x[1])) {
      ctx.Fail("input Weight: expected dims [", x[1], "] (one per class, dim 1 of X), got ", DimsToString(w));
    }
  }
  ReductionOf(ctx);
  return want;
}

void InferNllLoss(InferShapeContext& ctx) {
  DataType dtype;
  const Dims label = CheckInputs(ctx, &dtype);
  ctx.SetOutput("Out", ReductionOf(ctx) == Reduction::kNone ? label : Dims{}, dtype);
  if (ctx.HasOutput("Total_weight")) ctx.SetOutput("Total_weight", Dims{}, dtype);
}

void InferNllLossGrad(InferShapeContext& ctx) {
  DataType dtype;
  const Dims label = CheckInputs(ctx, &dtype);
  const std::string dout = GradVarName("Out");
  if (ctx.HasInput(dout)) {
    ops_b::CheckSameDtype(ctx, dout, dtype, "X");
    const Dims want = ReductionOf(ctx) == Reduction::kNone ? label : Dims{};
    if (!DimsCompatible(ctx.InputDims(dout), want)) {
      ctx.Fail("input ", dout, ": expected dims ", DimsToString(want), " (as Out), got ",
               DimsToString(ctx.InputDims(dout)));
    }
  }
  ctx.SetOutput(GradVarName("X"), ctx.InputDims("X"), dtype);
}

NllLayout LayoutOf(const Dims& x) {
  NllLayout l;
  l.n = x[0];
  l.c = x[1];
  for (size_t k = 2; k < x.size(); ++k) l.m *= x[k];
  return l;
}

// The class of label element i, or -1 when it is ignore_index; a label
// outside [0, C) otherwise is an error naming it and its position.
int64_t ClassAt(const ExecContext& ctx, const Tensor& label, int64_t i, int64_t c, int64_t ignore) {
  const int64_t v = label.dtype() == DataType::kINT32 ? label.data<int32_t>()[i] : label.data<int64_t>()[i];
  if (v == ignore) return -1;
  if (v < 0 || v >= c) {
    ctx.Fail("input Label: value ", v, " at position ", i, " (flat index into Label ", label.ShapeString(),
             ") is outside [0, ", c, ") and is not ignore_index ", ignore);
  }
  return v;
}

// Calls fn(i, x_index, weight) for every label element i not ignored, where
// x_index is X's element of its class; returns the sum of those weights.
template <typename T, typename Fn>
double ForEachLabel(const ExecContext& ctx, const NllLayout& l, const Tensor& label, const Tensor* weight, Fn&& fn) {
  const int64_t ignore = ctx.Attr<int64_t>("ignore_index");
  double total = 0;
  for (int64_t n = 0; n < l.n; ++n) {
    for (int64_t m = 0; m < l.m; ++m) {
      const int64_t i = n * l.m + m;
      const int64_t cls = ClassAt(ctx, label, i, l.c, ignore);
      if (cls < 0) continue;
      const double w = weight != nullptr ? static_cast<double>(weight->data<T>()[cls]) : 1.0;
      total += w;
      fn(i, (n * l.c + cls) * l.m + m, w);
    }
  }
  return total;
}

void NllLossKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  const Tensor* weight = ctx.InputOrNull("Weight");
  const Reduction r = ReductionOf(ctx);
  const NllLayout l = LayoutOf(x.dims());
  Tensor* out = ctx.Output("Out");
  Tensor* total_out = ctx.OutputOrNull("Total_weight");
  ops_b::DispatchFloat(ctx, "X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op = r == Reduction::kNone ? ops_b::ZeroFill<T>(out) : out->mutable_data<T>();
    double sum = 0;
    const double total = ForEachLabel<T>(ctx, l, label, weight, [&](int64_t i, int64_t xi, double w) {
      const double loss = -w * static_cast<double>(xp[xi]);
      if (r == Reduction::kNone) op[i] = static_cast<T>(loss);
      sum += loss;
    });
    // mean: 0 / 0 is NaN when every label is ignored (as torch and ONNX).
    if (r == Reduction::kSum) op[0] = static_cast<T>(sum);
    if (r == Reduction::kMean) op[0] = static_cast<T>(sum / total);
    if (total_out != nullptr) total_out->mutable_data<T>()[0] = static_cast<T>(total);
  });
}

// dX is zero but at each kept label's class: -weight * dOut (none: that
// element's; sum: dOut; mean: dOut / the summed weights).
void NllLossGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor& x = ctx.InputMeta("X");
  const Tensor& label = ctx.Input("Label");
  const Tensor* weight = ctx.InputOrNull("Weight");
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  const Reduction r = ReductionOf(ctx);
  const NllLayout l = LayoutOf(x.dims());
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    T* p = ops_b::ZeroFill<T>(dx);
    if (dout == nullptr) return;
    const T* g = dout->data<T>();
    // mean divides by the summed weights, known only after a first pass.
    const auto none = [](int64_t, int64_t, double) {};
    const double scale = r == Reduction::kMean ? 1.0 / ForEachLabel<T>(ctx, l, label, weight, none) : 1.0;
    ForEachLabel<T>(ctx, l, label, weight, [&](int64_t i, int64_t xi, double w) {
      const double go = static_cast<double>(r == Reduction::kNone ? g[i] : g[0]);
      p[xi] = static_cast<T>(-w * go * scale);
    });
  });
}

std::vector<AttrDef> Attrs() {
  return {{"ignore_index", AttrKind::kInt, Attribute(int64_t{-100})},
          {"reduction", AttrKind::kString, Attribute(std::string("mean"))}};
}

}  // namespace

void RegisterNllLossOps(OpRegistry& r) {
  OpInfo op;
  op.type = "nll_loss";
  op.doc =
      "Negative log-likelihood (Paddle's nll_loss, torch.nn.NLLLoss, ONNX NegativeLogLikelihoodLoss): for X "
      "(f32, f64; log-probabilities) [N, C] or [N, C, d1, ...] and Label (i64 or i32) [N] or [N, d1, ...], each "
      "label element's loss is -Weight[label] * X[n, label, d...] (Weight [C] optional, 1 when absent), 0 where "
      "Label equals attr ignore_index; a label outside [0, C) otherwise is an error naming it and its position. "
      "reduction \"none\": Out has Label's dims; \"sum\": Out [] is the sum; \"mean\": Out [] is the sum divided by "
      "the summed weights of the labels not ignored (NaN when all are). Total_weight [] (optional) is that sum of "
      "weights, for every reduction (Paddle leaves it 0 for \"none\"). Gradient: X@GRAD is zero but at each kept "
      "label's class, -Weight[label] times Out@GRAD (divided by the summed weights for \"mean\"); Label and Weight "
      "get none. JIT: framework";
  op.inputs = {{"X"}, {"Label"}, {"Weight", false, true}};
  op.outputs = {{"Out"}, {"Total_weight", false, true}};
  op.attrs = Attrs();
  op.infer_shape = InferNllLoss;
  op.reference_kernel = NllLossKernel;
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"X", "Label", "Weight"}, {}, {"Out"}, {"X"})};
  };
  op.no_grad_inputs = {"Label", "Weight"};
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "nll_loss_grad";
  grad.doc =
      "Gradient of nll_loss w.r.t. X: zero but at each kept label's class, -Weight[label] * Out@GRAD (that "
      "element's for \"none\", the one value for \"sum\", divided by the summed weights for \"mean\"); no "
      "Out@GRAD gives zeros. X is read for its dims only";
  grad.inputs = {{"X"}, {"Label"}, {"Weight", false, true}, {GradVarName("Out"), false, true}};
  grad.outputs = {{GradVarName("X"), false, true}};
  grad.attrs = Attrs();
  grad.infer_shape = InferNllLossGrad;
  grad.reference_kernel = NllLossGradKernel;
  grad.no_need_buffer = {"X"};
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

}  // namespace kiln
