// softmax and softmax_with_cross_entropy with their grads (layer_norm: layer_norm_op.cc).
#include <cmath>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_b::DispatchFloat;

// A tensor seen as [outer, d, inner] around one axis: element (o, a, i) is at
// (o * d + a) * inner + i. A "row" is one (o, i) pair, numbered o * inner + i.
struct AxisView {
  int64_t outer = 1, d = 1, inner = 1;
  int64_t Row(int64_t o, int64_t i) const { return o * inner + i; }
  int64_t At(int64_t o, int64_t a, int64_t i) const { return (o * d + a) * inner + i; }
};

AxisView ViewAround(const Dims& dims, int64_t axis) {
  AxisView v;
  for (int64_t k = 0; k < axis; ++k) v.outer *= dims[k];
  v.d = dims[axis];
  for (size_t k = axis + 1; k < dims.size(); ++k) v.inner *= dims[k];
  return v;
}

int64_t Axis(const InferShapeContext& ctx, size_t rank) {
  return NormalizeAxis(ctx.Attr<int64_t>("axis"), rank, ctx.OpName());
}
int64_t Axis(const ExecContext& ctx, size_t rank) {
  return NormalizeAxis(ctx.Attr<int64_t>("axis"), rank, ctx.OpName());
}

// Numerically stable softmax of one row into y (y may alias x). Returns
// log(sum(exp(x - max))) and writes the max to *row_max.
template <typename T>
double SoftmaxRow(const T* x, T* y, const AxisView& v, int64_t o, int64_t i, T* row_max) {
  T m = x[v.At(o, 0, i)];
  for (int64_t a = 1; a < v.d; ++a) m = std::max(m, x[v.At(o, a, i)]);
  double sum = 0;
  for (int64_t a = 0; a < v.d; ++a) {
    const T e = std::exp(x[v.At(o, a, i)] - m);
    y[v.At(o, a, i)] = e;
    sum += e;
  }
  const T inv = static_cast<T>(1.0 / sum);
  for (int64_t a = 0; a < v.d; ++a) y[v.At(o, a, i)] *= inv;
  *row_max = m;
  return std::log(sum);
}

// dx = y * (dy - sum(dy * y)) over one row, accumulated into dx when `add`.
// dx may alias dy: each element is read before it is written.
template <typename T>
void SoftmaxGradRow(const T* y, const T* dy, T* dx, const AxisView& v, int64_t o, int64_t i, bool add) {
  double dot = 0;
  for (int64_t a = 0; a < v.d; ++a) dot += static_cast<double>(dy[v.At(o, a, i)]) * y[v.At(o, a, i)];
  const T s = static_cast<T>(dot);
  for (int64_t a = 0; a < v.d; ++a) {
    const int64_t k = v.At(o, a, i);
    const T g = y[k] * (dy[k] - s);
    dx[k] = add ? dx[k] + g : g;
  }
}

// ---- softmax --------------------------------------------------------------------

void SoftmaxInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  if (x.empty()) ctx.Fail("input X: expected rank >= 1, got ", DimsToString(x));
  Axis(ctx, x.size());
  ctx.SetOutput("Out", x, dtype);
}

void SoftmaxGradInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "Out");
  const Dims y = ctx.InputDims("Out");
  if (y.empty()) ctx.Fail("input Out: expected rank >= 1, got ", DimsToString(y));
  Axis(ctx, y.size());
  if (ctx.HasInput("Out@GRAD") && !DimsCompatible(ctx.InputDims("Out@GRAD"), y)) {
    ctx.Fail("input Out@GRAD: expected dims ", DimsToString(y), ", got ", DimsToString(ctx.InputDims("Out@GRAD")));
  }
  if (ctx.HasOutput("X@GRAD")) ctx.SetOutput("X@GRAD", y, dtype);
}

template <typename T>
void SoftmaxKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const AxisView v = ViewAround(xt.dims(), Axis(ctx, xt.rank()));
  const T* x = xt.data<T>();
  T* y = ctx.Output("Out")->mutable_data<T>();
  T m;
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) SoftmaxRow(x, y, v, o, i, &m);
  }
}

template <typename T>
void SoftmaxGradKernel(ExecContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (dxt == nullptr) return;
  const Tensor& yt = ctx.Input("Out");
  const Tensor* dyt = ctx.InputOrNull("Out@GRAD");
  if (dyt == nullptr) {
    ops_b::ZeroFill<T>(dxt);
    return;
  }
  const AxisView v = ViewAround(yt.dims(), Axis(ctx, yt.rank()));
  const T* y = yt.data<T>();
  const T* dy = dyt->data<T>();
  T* dx = dxt->mutable_data<T>();
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) SoftmaxGradRow(y, dy, dx, v, o, i, /*add=*/false);
  }
}

// ---- softmax_with_cross_entropy ----------------------------------------------------

// Checks Label against Logits and returns Loss's dims.
Dims CrossEntropyShapes(const InferShapeContext& ctx, const Dims& logits, int64_t axis) {
  if (ctx.InputDtype("Label") != DataType::kINT64) {
    ctx.Fail("input Label: expected dtype i64, got ", DataTypeName(ctx.InputDtype("Label")));
  }
  Dims loss = logits;
  loss[axis] = 1;
  const Dims label = ctx.InputDims("Label");
  if (!DimsCompatible(label, loss)) {
    ctx.Fail("input Label: expected dims ", DimsToString(loss), " (Logits ", DimsToString(logits),
             " with 1 at axis ", axis, "), got ", DimsToString(label));
  }
  return loss;
}

void CrossEntropyInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "Logits");
  const Dims logits = ctx.InputDims("Logits");
  if (logits.empty()) ctx.Fail("input Logits: expected rank >= 1, got ", DimsToString(logits));
  const Dims loss = CrossEntropyShapes(ctx, logits, Axis(ctx, logits.size()));
  ctx.SetOutput("Softmax", logits, dtype);
  ctx.SetOutput("Loss", loss, dtype);
}

void CrossEntropyGradInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "Softmax");
  const Dims sm = ctx.InputDims("Softmax");
  if (sm.empty()) ctx.Fail("input Softmax: expected rank >= 1, got ", DimsToString(sm));
  const Dims loss = CrossEntropyShapes(ctx, sm, Axis(ctx, sm.size()));
  if (ctx.HasInput("Loss@GRAD") && !DimsCompatible(ctx.InputDims("Loss@GRAD"), loss)) {
    ctx.Fail("input Loss@GRAD: expected dims ", DimsToString(loss), ", got ", DimsToString(ctx.InputDims("Loss@GRAD")));
  }
  if (ctx.HasInput("Softmax@GRAD") && !DimsCompatible(ctx.InputDims("Softmax@GRAD"), sm)) {
    ctx.Fail("input Softmax@GRAD: expected dims ", DimsToString(sm), ", got ",
             DimsToString(ctx.InputDims("Softmax@GRAD")));
  }
  if (ctx.HasOutput("Logits@GRAD")) ctx.SetOutput("Logits@GRAD", sm, dtype);
}

int64_t CheckedLabel(const ExecContext& ctx, const int64_t* labels, int64_t row, int64_t classes) {
  const int64_t l = labels[row];
  if (l < 0 || l >= classes) {
    ctx.Fail("label ", l, " at row ", row, " is out of range [0, ", classes, ")");
  }
  return l;
}

template <typename T>
void CrossEntropyKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("Logits");
  const AxisView v = ViewAround(xt.dims(), Axis(ctx, xt.rank()));
  const int64_t* labels = ctx.Input("Label").data<int64_t>();
  const T* x = xt.data<T>();
  T* sm = ctx.Output("Softmax")->mutable_data<T>();
  T* loss = ctx.Output("Loss")->mutable_data<T>();
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t row = v.Row(o, i);
      const int64_t l = CheckedLabel(ctx, labels, row, v.d);
      const T xl = x[v.At(o, l, i)];
      T m;
      const double log_sum = SoftmaxRow(x, sm, v, o, i, &m);
      // -log softmax[l] from the logits, not from the rounded softmax.
      loss[row] = static_cast<T>(log_sum - static_cast<double>(xl - m));
    }
  }
}

template <typename T>
void CrossEntropyGradKernel(ExecContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("Logits@GRAD");
  if (dxt == nullptr) return;
  const Tensor& smt = ctx.Input("Softmax");
  const AxisView v = ViewAround(smt.dims(), Axis(ctx, smt.rank()));
  const int64_t* labels = ctx.Input("Label").data<int64_t>();
  const T* sm = smt.data<T>();
  const Tensor* dsm_t = ctx.InputOrNull("Softmax@GRAD");
  const Tensor* dloss_t = ctx.InputOrNull("Loss@GRAD");
  const T* dsm = dsm_t ? dsm_t->data<T>() : nullptr;
  const T* dloss = dloss_t ? dloss_t->data<T>() : nullptr;
  T* dx = ops_b::ZeroFill<T>(dxt);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t row = v.Row(o, i);
      const int64_t l = CheckedLabel(ctx, labels, row, v.d);
      if (dsm != nullptr) SoftmaxGradRow(sm, dsm, dx, v, o, i, /*add=*/true);
      if (dloss == nullptr) continue;
      // d(-log softmax[l]) / dx = softmax - onehot(l)
      const T g = dloss[row];
      for (int64_t a = 0; a < v.d; ++a) dx[v.At(o, a, i)] += g * sm[v.At(o, a, i)];
      dx[v.At(o, l, i)] -= g;
    }
  }
}

std::vector<AttrDef> AxisAttr() { return {{"axis", AttrKind::kInt, Attribute(int64_t{-1})}}; }

}  // namespace

void RegisterNormSoftmaxOps(OpRegistry& r) {
  OpInfo softmax;
  softmax.type = "softmax";
  softmax.doc = "Numerically stable softmax of X along axis";
  softmax.inputs = {{"X"}};
  softmax.outputs = {{"Out"}};
  softmax.attrs = AxisAttr();
  softmax.infer_shape = SoftmaxInferShape;
  softmax.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { SoftmaxKernel<decltype(tag)>(ctx); });
  };
  softmax.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {}, {"Out"}, {"Out"}, {"X"})};
  };
  softmax.inplace = {{"X", "Out"}};
  softmax.jit = JitLowering::kOneDnn;
  r.Add(std::move(softmax));

  OpInfo softmax_grad;
  softmax_grad.type = "softmax_grad";
  softmax_grad.doc = "Gradient of softmax: X@GRAD = Out * (Out@GRAD - sum(Out@GRAD * Out))";
  softmax_grad.inputs = {{"Out"}, {"Out@GRAD", false, true}};
  softmax_grad.outputs = {{"X@GRAD", false, true}};
  softmax_grad.attrs = AxisAttr();
  softmax_grad.infer_shape = SoftmaxGradInferShape;
  softmax_grad.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "Out", [&](auto tag) { SoftmaxGradKernel<decltype(tag)>(ctx); });
  };
  softmax_grad.inplace = {{"Out@GRAD", "X@GRAD"}};
  softmax_grad.jit = JitLowering::kOneDnn;
  r.Add(std::move(softmax_grad));

  OpInfo ce;
  ce.type = "softmax_with_cross_entropy";
  ce.doc = "Softmax of Logits along axis and per-row loss -log(Softmax[Label])";
  ce.inputs = {{"Logits"}, {"Label"}};
  ce.outputs = {{"Softmax"}, {"Loss"}};
  ce.attrs = AxisAttr();
  ce.infer_shape = CrossEntropyInferShape;
  ce.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "Logits", [&](auto tag) { CrossEntropyKernel<decltype(tag)>(ctx); });
  };
  ce.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"Label"}, {"Softmax"}, {"Softmax", "Loss"}, {"Logits"})};
  };
  ce.no_grad_inputs = {"Label"};
  ce.jit = JitLowering::kFramework;
  r.Add(std::move(ce));

  OpInfo ce_grad;
  ce_grad.type = "softmax_with_cross_entropy_grad";
  ce_grad.doc = "Gradient of softmax_with_cross_entropy w.r.t. Logits (from Loss@GRAD and Softmax@GRAD)";
  ce_grad.inputs = {{"Label"}, {"Softmax"}, {"Softmax@GRAD", false, true}, {"Loss@GRAD", false, true}};
  ce_grad.outputs = {{"Logits@GRAD", false, true}};
  ce_grad.attrs = AxisAttr();
  ce_grad.infer_shape = CrossEntropyGradInferShape;
  ce_grad.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "Softmax", [&](auto tag) { CrossEntropyGradKernel<decltype(tag)>(ctx); });
  };
  ce_grad.jit = JitLowering::kFramework;
  r.Add(std::move(ce_grad));
}

}  // namespace kiln
