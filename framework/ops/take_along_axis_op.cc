// take_along_axis (Paddle's; torch.gather, numpy.take_along_axis, ONNX
// GatherElements) and its grad: each element of Index picks, along Axis, the
// element of Input at its own position in the other dims. The grad adds
// Result@GRAD back at the picked places (a scatter-add). JIT: framework.
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

// Checks Input, Index and Axis; returns Axis in [0, rank).
int64_t CheckInputs(const InferShapeContext& ctx) {
  const Dims x = ctx.InputDims("Input");
  const Dims idx = ctx.InputDims("Index");
  ops::CheckInputDtype(ctx, "Index", {DataType::kINT64, DataType::kINT32});
  if (x.empty()) ctx.Fail("input Input: expected rank >= 1, got ", DimsToString(x));
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("Axis"), x.size(), ctx.OpName() + ": attribute Axis");
  if (idx.size() != x.size()) {
    ctx.Fail("input Index: expected rank ", x.size(), " (Input's), got ", DimsToString(idx));
  }
  for (size_t d = 0; d < x.size(); ++d) {
    if (static_cast<int64_t>(d) != axis && x[d] >= 0 && idx[d] > x[d]) {
      ctx.Fail("input Index: dim ", d, " is ", idx[d], ", larger than Input's ", x[d], " (Input ", DimsToString(x),
               ", Index ", DimsToString(idx), "; only dim Axis = ", axis, " may be)");
    }
  }
  return axis;
}

void InferTakeAlongAxis(InferShapeContext& ctx) {
  const DataType dtype = ops::CheckInputDtype(
      ctx, "Input", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32, DataType::kBOOL});
  CheckInputs(ctx);
  ctx.SetOutput("Result", ctx.InputDims("Index"), dtype);
}

void InferTakeAlongAxisGrad(InferShapeContext& ctx) {
  const DataType dtype = ops::CheckFloatInput(ctx, "Input");
  CheckInputs(ctx);
  const std::string dres = GradVarName("Result");
  if (ctx.HasInput(dres)) {
    ops::CheckSameDtype(ctx, dres, dtype, "Input");
    ops_a::CheckSameDims(ctx, dres, ctx.InputDims("Index"), "Index");
  }
  ctx.SetOutput(GradVarName("Input"), ctx.InputDims("Input"), dtype);
}

// Calls fn(k, src) for every element k of Index, src being the flat offset
// into Input it picks; a value outside [-n, n) (n = Input's Axis dim) is an
// error naming it and its position, a negative one counts from the end.
template <typename Fn>
void ForEachPick(const ExecContext& ctx, const Dims& x, const Tensor& index, Fn&& fn) {
  const size_t rank = x.size();
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("Axis"), rank, ctx.OpName() + ": attribute Axis");
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * x[d];
  const Dims& idx = index.dims();
  const int64_t n = x[axis];
  for (int64_t k = 0; k < index.numel(); ++k) {
    int64_t v = index.dtype() == DataType::kINT32 ? index.data<int32_t>()[k] : index.data<int64_t>()[k];
    if (v < -n || v >= n) {
      ctx.Fail("input Index: value ", v, " at position ", k, " (flat index into Index ", index.ShapeString(),
               ") is outside [", -n, ", ", n, ") (dim ", axis, " of Input ", DimsToString(x),
               "; negative values count from the end)");
    }
    if (v < 0) v += n;
    int64_t src = 0, rest = k;
    for (size_t d = rank; d-- > 0;) {
      const int64_t coord = rest % idx[d];
      rest /= idx[d];
      src += (static_cast<int64_t>(d) == axis ? v : coord) * stride[d];
    }
    fn(k, src);
  }
}

void TakeAlongAxisKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  const Tensor& index = ctx.Input("Index");
  Tensor* out = ctx.Output("Result");
  // A copy of each picked element: any dtype, by its bytes.
  const size_t size = SizeOf(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out->raw_mutable_data(x.dtype()));
  ForEachPick(ctx, x.dims(), index, [&](int64_t k, int64_t s) { std::memcpy(dst + k * size, src + s * size, size); });
}

void TakeAlongAxisGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("Input"));
  if (dx == nullptr) return;
  const Tensor& x = ctx.InputMeta("Input");
  const Tensor& index = ctx.Input("Index");
  const Tensor* dres = ctx.InputOrNull(GradVarName("Result"));
  ops_a::DispatchFloat(ctx, x.dtype(), "input Input", [&](auto tag) {
    using T = decltype(tag);
    T* p = ops::ZeroFill<T>(dx);
    const T* g = dres != nullptr ? dres->data<T>() : nullptr;
    // Indices are checked even without a gradient: a bad one is an error either way.
    ForEachPick(ctx, x.dims(), index, [&](int64_t k, int64_t s) {
      if (g != nullptr) p[s] += g[k];
    });
  });
}

}  // namespace

void RegisterTakeAlongAxisOps(OpRegistry& r) {
  const std::vector<AttrDef> attrs = {{"Axis", AttrKind::kInt, Attribute(int64_t{0})}};
  OpInfo op;
  op.type = "take_along_axis";
  op.doc =
      "Result = the elements of Input (any dtype) picked along attr Axis (negative counts from the end) by Index "
      "(i64 or i32, Input's rank, each dim but Axis at most Input's): Result[..., i, ...] = Input[..., "
      "Index[..., i, ...], ...] with every other coordinate its own (Paddle's take_along_axis, torch.gather, ONNX "
      "GatherElements). Result has Index's dims. An index in [-n, -1] counts from the end (n is Input's Axis dim); "
      "one outside [-n, n) is an error naming the value and its position. Gradient: Input@GRAD (f32, f64) is zeros "
      "with Result@GRAD added at the picked places (repeated picks accumulate); Index gets none. JIT: framework "
      "(data-dependent reads)";
  op.inputs = {ops_a::Required("Input"), ops_a::Required("Index")};
  op.outputs = {ops_a::Required("Result")};
  op.attrs = attrs;
  op.infer_shape = InferTakeAlongAxis;
  op.reference_kernel = TakeAlongAxisKernel;
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"Input", "Index"}, {}, {"Result"}, {"Input"})};
  };
  op.no_grad_inputs = {"Index"};
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "take_along_axis_grad";
  grad.doc =
      "Gradient of take_along_axis: Input@GRAD (f32, f64) has Input's dims, zeros with each Result@GRAD element "
      "added where its index picked (a scatter-add); no Result@GRAD gives zeros. Input is read for its dims only";
  grad.inputs = {ops_a::Required("Input"), ops_a::Required("Index"), ops_a::Optional(GradVarName("Result"))};
  grad.outputs = {ops_a::Optional(GradVarName("Input"))};
  grad.attrs = attrs;
  grad.infer_shape = InferTakeAlongAxisGrad;
  grad.reference_kernel = TakeAlongAxisGradKernel;
  grad.no_need_buffer = {"Input"};
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

}  // namespace kiln
