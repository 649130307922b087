// gather (slices of X picked by an index along an axis, and its scatter-add
// gradient) and one_hot (Paddle fluid's: ids [..., 1] -> f32 [..., depth]).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// Value i of an i64 or i32 tensor (shape inference has checked the dtype).
int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kINT32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}

// ---- gather ---------------------------------------------------------------------------

// Checks Index (i64 or i32, [K] or [K, 1]); returns K.
int64_t CheckIndex(const InferShapeContext& ctx) {
  ops::CheckInputDtype(ctx, "Index", {DataType::kINT64, DataType::kINT32});
  const Dims idx = ctx.InputDims("Index");
  if (idx.size() != 1 && !(idx.size() == 2 && DimCompatible(idx[1], 1))) {
    ctx.Fail("input Index: expected dims [K] or [K, 1], got ", DimsToString(idx));
  }
  return idx[0];
}

// Out's dims: X's with the axis dim replaced by K.
Dims GatherOutDims(const InferShapeContext& ctx, const Dims& x) {
  if (x.empty()) ctx.Fail("input X: expected rank >= 1, got ", DimsToString(x));
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), x.size(), ctx.OpName() + ": attribute axis");
  Dims out = x;
  out[axis] = CheckIndex(ctx);
  return out;
}

void InferGather(InferShapeContext& ctx) {
  const DataType dtype = ops::CheckInputDtype(
      ctx, "X", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32, DataType::kBOOL});
  ctx.SetOutput("Out", GatherOutDims(ctx, ctx.InputDims("X")), dtype);
}

void InferGatherGrad(InferShapeContext& ctx) {
  const DataType dtype = ops::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const Dims out = GatherOutDims(ctx, x);
  const std::string dout = GradVarName("Out");
  if (ctx.HasInput(dout)) {
    ops::CheckSameDtype(ctx, dout, dtype, "X");
    ops_a::CheckSameDims(ctx, dout, out, "Out");
  }
  ctx.SetOutput(GradVarName("X"), x, dtype);
}

// X viewed as [outer, rows, inner] around the axis; `rows` is X's axis dim.
struct GatherLayout {
  int64_t axis = 0, outer = 1, rows = 1, inner = 1, k = 0;
};

GatherLayout MakeGatherLayout(const ExecContext& ctx, const Dims& x, const Tensor& index) {
  GatherLayout l;
  l.axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), x.size(), ctx.OpName() + ": attribute axis");
  for (int64_t d = 0; d < l.axis; ++d) l.outer *= x[d];
  l.rows = x[l.axis];
  for (size_t d = l.axis + 1; d < x.size(); ++d) l.inner *= x[d];
  l.k = index.numel();
  return l;
}

// Index value number `k` as a row in [0, rows): a value in [-rows, -1]
// counts from the end (numpy.take, Paddle 2.x's gather, ONNX Gather; not
// torch.index_select). Checked before any memory is touched.
int64_t CheckedIndex(const ExecContext& ctx, const Tensor& index, int64_t k, const GatherLayout& l,
                     const Tensor& x) {
  const int64_t v = IndexAt(index, k);
  if (v < -l.rows || v >= l.rows) {
    ctx.Fail("input Index: value ", v, " at position ", k, " is outside [", -l.rows, ", ", l.rows, ") (dim ", l.axis,
             " of X ", x.ShapeString(), "; negative values count from the end)");
  }
  return v < 0 ? v + l.rows : v;
}

void GatherKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& index = ctx.Input("Index");
  const GatherLayout l = MakeGatherLayout(ctx, x.dims(), index);
  Tensor* out = ctx.Output("Out");
  // A plain copy of each picked slice: any dtype, by its bytes.
  const size_t bytes = static_cast<size_t>(l.inner) * SizeOf(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out->raw_mutable_data(x.dtype()));
  for (int64_t k = 0; k < l.k; ++k) {
    const int64_t row = CheckedIndex(ctx, index, k, l, x);
    for (int64_t o = 0; o < l.outer; ++o) {
      if (bytes > 0) std::memcpy(dst + (o * l.k + k) * bytes, src + (o * l.rows + row) * bytes, bytes);
    }
  }
}

template <typename T>
void GatherGradKernel(ExecContext& ctx) {
  Tensor* dx_t = ctx.OutputOrNull(GradVarName("X"));
  if (dx_t == nullptr) return;
  // X is read for its dims only (no-need-buffer).
  const Tensor& x = ctx.InputMeta("X");
  const Tensor& index = ctx.Input("Index");
  const GatherLayout l = MakeGatherLayout(ctx, x.dims(), index);
  T* dx = ops::ZeroFill<T>(dx_t);
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  // Indices are checked even without a gradient: a bad one is an error either way.
  for (int64_t k = 0; k < l.k; ++k) {
    const int64_t row = CheckedIndex(ctx, index, k, l, x);
    if (dout == nullptr) continue;
    for (int64_t o = 0; o < l.outer; ++o) {
      const T* g = dout->data<T>() + (o * l.k + k) * l.inner;
      T* d = dx + (o * l.rows + row) * l.inner;
      for (int64_t i = 0; i < l.inner; ++i) d[i] += g[i];
    }
  }
}

void GatherGrad(ExecContext& ctx) {
  const DataType dtype = ctx.InputMeta("X").dtype();
  if (dtype == DataType::kFP32) {
    GatherGradKernel<float>(ctx);
  } else if (dtype == DataType::kFP64) {
    GatherGradKernel<double>(ctx);
  } else {
    ctx.Fail("input X: expected dtype f32 or f64, got ", DataTypeName(dtype));
  }
}

// ---- one_hot ----------------------------------------------------------------------------

void InferOneHot(InferShapeContext& ctx) {
  ops::CheckInputDtype(ctx, "X", {DataType::kINT64, DataType::kINT32});
  const Dims x = ctx.InputDims("X");
  if (x.empty() || !DimCompatible(x.back(), 1)) {
    ctx.Fail("input X: expected dims [..., 1] (one id per row), got ", DimsToString(x));
  }
  const int64_t depth = ctx.Attr<int64_t>("depth");
  if (depth <= 0) ctx.Fail("attribute depth: expected a positive number of classes, got ", depth);
  Dims out = x;
  out.back() = depth;
  ctx.SetOutput("Out", out, DataType::kFP32);
}

void OneHotKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t depth = ctx.Attr<int64_t>("depth");
  const bool allow = ctx.Attr<bool>("allow_out_of_range");
  Tensor* out_t = ctx.Output("Out");
  float* out = ops::ZeroFill<float>(out_t);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t id = IndexAt(x, i);
    if (id >= 0 && id < depth) {
      out[i * depth + id] = 1.0f;
    } else if (!allow) {
      ctx.Fail("input X: id ", id, " at position ", i, " (flat index into X ", x.ShapeString(), ") is outside [0, ",
               depth, ") (attribute depth; allow_out_of_range gives such ids a row of zeros)");
    }
  }
}

// ---- registration -----------------------------------------------------------------------

void AddGather(OpRegistry& r) {
  const std::vector<AttrDef> attrs = {{"axis", AttrKind::kInt, Attribute(int64_t{0})}};
  OpInfo op;
  op.type = "gather";
  op.doc =
      "Out = the slices of X (any dtype) along attr axis (negative counts from the end) picked by Index (i64 or "
      "i32, [K] or [K, 1]): Out has X's dims with the axis dim replaced by K. An index in [-n, -1] counts from the "
      "end (n is X's axis dim; as numpy.take, Paddle 2.x's gather and ONNX Gather, unlike torch.index_select); one "
      "outside [-n, n) is an error naming the value and its position. Gradient: X@GRAD is zeros with the Out@GRAD "
      "slices added at the rows their indices picked (repeated indices accumulate, -1 and n-1 alike); Index gets "
      "none. JIT: "
      "framework (its kernel runs inside the cluster: data-dependent reads, no generated kernel does them)";
  op.inputs = {ops_a::Required("X"), ops_a::Required("Index")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = attrs;
  op.infer_shape = InferGather;
  op.reference_kernel = GatherKernel;
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"X", "Index"}, {}, {"Out"}, {"X"})};
  };
  op.no_grad_inputs = {"Index"};
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "gather_grad";
  grad.doc =
      "Gradient of gather: X@GRAD (f32, f64) has X's dims, each slice the sum of the Out@GRAD slices whose index "
      "picked it (a negative index picks the row it counts from the end; zeros for slices never picked)";
  grad.inputs = {ops_a::Required("X"), ops_a::Required("Index"), ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = attrs;
  grad.infer_shape = InferGatherGrad;
  grad.reference_kernel = GatherGrad;
  grad.no_need_buffer = {"X"};
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

void AddOneHot(OpRegistry& r) {
  OpInfo op;
  op.type = "one_hot";
  op.doc =
      "Out (f32) = the one-hot rows of the ids in X (i64 or i32, [..., 1]): Out is [..., depth], row i all zeros "
      "but a 1 at X[i]. An id outside [0, depth) is an error naming it and its position, or, with "
      "allow_out_of_range, a row of zeros. Not differentiable (X is an integer, so append_backward sends no "
      "gradient through it). JIT: framework (its kernel runs inside the cluster, so it does not split one)";
  op.inputs = {ops_a::Required("X")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = {{"depth", AttrKind::kInt, std::nullopt}, {"allow_out_of_range", AttrKind::kBool, Attribute(false)}};
  op.infer_shape = InferOneHot;
  op.reference_kernel = OneHotKernel;
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));
}

}  // namespace

void RegisterGatherOneHotOps(OpRegistry& r) {
  AddGather(r);
  AddOneHot(r);
}

}  // namespace kiln
