// cumsum and cumsum_grad (Paddle's attributes): running sums along one axis,
// inclusive or exclusive, forwards or in reverse, or over the flattened X.
// The grad is the running sum of Out@GRAD in the other direction. JIT:
// framework (a generated kernel has no carried state between points).
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// X seen as [outer, len, inner] around the summed axis (all of X, flat,
// with flatten).
struct ScanShape {
  int64_t outer = 1, len = 1, inner = 1;
};

template <typename Ctx>
ScanShape ScanShapeOf(const Ctx& ctx, const Dims& x) {
  ScanShape s;
  if (ctx.template Attr<bool>("flatten")) {
    s.len = Numel(x);
    return s;
  }
  if (x.empty()) return s;
  const int64_t axis = NormalizeAxis(ctx.template Attr<int64_t>("axis"), x.size(), ctx.OpName() + ": attribute axis");
  for (int64_t d = 0; d < axis; ++d) s.outer *= x[d];
  s.len = x[axis];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.size(); ++d) s.inner *= x[d];
  return s;
}

// out[k] = the sum of in[k'] over k' before k (after k with `reverse`), and
// k itself unless `exclusive`. Floats sum in double, integers in 64-bit
// two's complement (wrapping as the dtype's own sum would).
template <typename T>
void Scan(const T* in, T* out, const ScanShape& s, bool exclusive, bool reverse) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      const int64_t base = o * s.len * s.inner + i;
      Acc acc = 0;
      for (int64_t k = 0; k < s.len; ++k) {
        const int64_t at = base + (reverse ? s.len - 1 - k : k) * s.inner;
        const Acc v = static_cast<Acc>(in[at]);
        if (!exclusive) acc += v;
        out[at] = static_cast<T>(acc);
        if (exclusive) acc += v;
      }
    }
  }
}

template <typename Ctx>
Dims CumsumOutDims(const Ctx& ctx, const Dims& x) {
  return ctx.template Attr<bool>("flatten") ? Dims{Numel(x) < 0 ? -1 : Numel(x)} : x;
}

void InferCumsum(InferShapeContext& ctx) {
  const DataType dtype =
      ops::CheckInputDtype(ctx, "X", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32});
  const Dims x = ctx.InputDims("X");
  if (!ctx.Attr<bool>("flatten") && !x.empty()) {
    NormalizeAxis(ctx.Attr<int64_t>("axis"), x.size(), ctx.OpName() + ": attribute axis");
  }
  ctx.SetOutput("Out", CumsumOutDims(ctx, x), dtype);
}

void CumsumKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const ScanShape s = ScanShapeOf(ctx, x.dims());
  Tensor* out = ctx.Output("Out");
  ops::DispatchNumeric(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    Scan(x.data<T>(), out->mutable_data<T>(), s, ctx.Attr<bool>("exclusive"), ctx.Attr<bool>("reverse"));
  });
}

void InferCumsumGrad(InferShapeContext& ctx) {
  const std::string dout = GradVarName("Out");
  if (!ctx.HasInput(dout)) ctx.Fail("input ", dout, " is required (it gives X@GRAD its values)");
  const DataType dtype = ops::CheckFloatInput(ctx, dout);
  ops::CheckSameDtype(ctx, "X", dtype, dout);
  const Dims x = ctx.InputDims("X");
  ops_a::CheckSameDims(ctx, dout, CumsumOutDims(ctx, x), "Out");
  ctx.SetOutput(GradVarName("X"), x, dtype);
}

// dX[k] = the sum of dOut over the outputs that summed X[k]: a scan of dOut
// in the other direction, exclusive as the forward was.
void CumsumGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const ScanShape s = ScanShapeOf(ctx, ctx.InputMeta("X").dims());
  ops_a::DispatchFloat(ctx, dout.dtype(), "input Out@GRAD", [&](auto tag) {
    using T = decltype(tag);
    Scan(dout.data<T>(), dx->mutable_data<T>(), s, ctx.Attr<bool>("exclusive"), !ctx.Attr<bool>("reverse"));
  });
}

}  // namespace

void RegisterCumsumOps(OpRegistry& r) {
  const std::vector<AttrDef> attrs = {{"axis", AttrKind::kInt, Attribute(int64_t{-1})},
                                      {"flatten", AttrKind::kBool, Attribute(false)},
                                      {"exclusive", AttrKind::kBool, Attribute(false)},
                                      {"reverse", AttrKind::kBool, Attribute(false)}};
  OpInfo op;
  op.type = "cumsum";
  op.doc =
      "Out = the running sums of X along axis (negative counts from the end): Out[k] = X[0] + ... + X[k]; "
      "exclusive leaves X[k] out (Out[0] = 0), reverse sums from the end (Out[k] = X[k] + ... + X[n-1]); flatten "
      "sums X's elements in order and Out is [numel]. f32, f64 (summed in double), i64, i32 (wrapping). JIT: "
      "framework";
  op.inputs = {ops_a::Required("X")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = attrs;
  op.infer_shape = InferCumsum;
  op.reference_kernel = CumsumKernel;
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"X"}, {}, {"Out"}, {"X"})};
  };
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "cumsum_grad";
  grad.doc =
      "Gradient of cumsum: X@GRAD = the running sums of Out@GRAD in the other direction (reverse flipped, exclusive "
      "kept), with X's dims. JIT: framework";
  grad.inputs = {ops_a::Required("X"), ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = attrs;
  grad.infer_shape = InferCumsumGrad;
  grad.reference_kernel = CumsumGradKernel;
  grad.no_need_buffer = {"X"};
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

}  // namespace kiln
