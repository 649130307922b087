// reduce_max, reduce_min and their grads. Attrs and shapes are those of
// reduce_sum (reduce_dims.h). A NaN in a group makes its result NaN, as
// torch.amax; the gradient goes to the elements equal to the result, shared
// equally among ties (torch.amax's backward).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"
#include "framework/ops/reduce_dims.h"

namespace kiln {
namespace {

using ops::IsNan;
using ops::KeptDims;
using ops::ReducedDims;
using ops::ReduceOutDims;
using ops_a::ForEachBroadcast;
using ops_a::MakeBroadcastLoops;

// The value a group starts from: -inf for max (+inf for min) where T has
// infinities, so a group of -inf gives -inf; T's extreme otherwise.
template <typename T>
T Identity(bool max) {
  using L = std::numeric_limits<T>;
  if constexpr (L::has_infinity) {
    return max ? -L::infinity() : L::infinity();
  } else {
    return max ? L::lowest() : L::max();
  }
}

// The comparison alone would skip a NaN (every comparison with it is false);
// taking it explicitly makes it stick, since nothing compares above it after.
template <typename T>
bool Replaces(T v, T acc, bool max) {
  return IsNan(v) || (max ? v > acc : v < acc);
}

void InferReduceMaxMin(InferShapeContext& ctx) {
  const DataType dtype =
      ops::CheckInputDtype(ctx, "X", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32});
  const Dims x = ctx.InputDims("X");
  const std::vector<bool> reduced = ReducedDims(ctx, x.size());
  for (size_t d = 0; d < x.size(); ++d) {
    if (reduced[d] && x[d] == 0) {
      ctx.Fail("input X: reduced dim ", d, " has size 0 (X is ", DataTypeName(dtype), DimsToString(x),
               "): a group of no elements has no extreme value");
    }
  }
  ctx.SetOutput("Out", ReduceOutDims(x, reduced, ctx.Attr<bool>("keep_dim")), dtype);
}

void ReduceMaxMinKernel(ExecContext& ctx, bool max) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  // Out's elements are in the order of X's dims with the reduced ones at 1.
  const auto loops = MakeBroadcastLoops(x.dims(), KeptDims(x.dims(), ReducedDims(ctx, x.rank())));
  ops::DispatchNumeric(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    T* o = out->mutable_data<T>();
    std::fill(o, o + loops.y_numel, Identity<T>(max));
    const T* p = x.data<T>();
    ForEachBroadcast(loops, [&](int64_t i, int64_t j) {
      if (Replaces(p[i], o[j], max)) o[j] = p[i];
    });
  });
}

void InferReduceMaxMinGrad(InferShapeContext& ctx) {
  const DataType dtype = ops::CheckFloatInput(ctx, "X");
  const Dims x = ctx.InputDims("X");
  const Dims out = ReduceOutDims(x, ReducedDims(ctx, x.size()), ctx.Attr<bool>("keep_dim"));
  ops::CheckSameDtype(ctx, "Out", dtype, "X");
  ops_a::CheckSameDims(ctx, "Out", out, "X reduced");
  const std::string dout = GradVarName("Out");
  if (ctx.HasInput(dout)) {
    ops::CheckSameDtype(ctx, dout, dtype, "X");
    ops_a::CheckSameDims(ctx, dout, out, "Out");
  }
  ctx.SetOutput(GradVarName("X"), x, dtype);
}

// Each of the k elements of a group equal to its result (a NaN result: the
// group's NaNs) gets Out@GRAD / k; the others 0.
template <typename T>
void ReduceMaxMinGradKernel(ExecContext& ctx) {
  Tensor* dx_t = ctx.OutputOrNull(GradVarName("X"));
  if (dx_t == nullptr) return;
  const Tensor& x = ctx.Input("X");
  const Tensor& out = ctx.Input("Out");
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  T* dx = ops::ZeroFill<T>(dx_t);
  if (dout == nullptr) return;
  const auto loops = MakeBroadcastLoops(x.dims(), KeptDims(x.dims(), ReducedDims(ctx, x.rank())));
  const T* xp = x.data<T>();
  const T* op = out.data<T>();
  const T* g = dout->data<T>();
  auto hit = [&](int64_t i, int64_t j) { return xp[i] == op[j] || (std::isnan(xp[i]) && std::isnan(op[j])); };
  std::vector<int64_t> ties(static_cast<size_t>(loops.y_numel), 0);
  ForEachBroadcast(loops, [&](int64_t i, int64_t j) {
    if (hit(i, j)) ++ties[j];
  });
  ForEachBroadcast(loops, [&](int64_t i, int64_t j) {
    if (hit(i, j)) dx[i] = g[j] / static_cast<T>(ties[j]);
  });
}

void ReduceMaxMinGrad(ExecContext& ctx) {
  const DataType dtype = ctx.Input("X").dtype();
  if (dtype == DataType::kFP32) {
    ReduceMaxMinGradKernel<float>(ctx);
  } else if (dtype == DataType::kFP64) {
    ReduceMaxMinGradKernel<double>(ctx);
  } else {
    ctx.Fail("input X: expected dtype f32 or f64, got ", DataTypeName(dtype));
  }
}

std::string Doc(const std::string& what, const std::string& nan_note) {
  return "Out = the " + what +
         " of X over attr dim (negative dims count from the end; every dim when reduce_all or dim is empty); "
         "reduced dims stay as 1 with keep_dim, else vanish (nothing left: [1]). f32, f64, i64, i32. " +
         nan_note +
         " A reduced dim of size 0 is an error. Gradient (f32, f64): the k elements of a group equal to its "
         "result share Out@GRAD equally (X@GRAD = Out@GRAD / k there, 0 elsewhere: torch.amax's rule for ties; "
         "a NaN result sends it to the group's NaNs). JIT: framework (its kernel runs inside the cluster: the "
         "generated kernels reduce only by summing)";
}

void AddMaxMin(OpRegistry& r, const std::string& type, bool max) {
  const std::vector<AttrDef> attrs = {{"dim", AttrKind::kInts, Attribute(std::vector<int64_t>{0})},
                                      {"keep_dim", AttrKind::kBool, Attribute(false)},
                                      {"reduce_all", AttrKind::kBool, Attribute(false)}};
  OpInfo fwd;
  fwd.type = type;
  fwd.doc = Doc(max ? "maximum" : "minimum", "A NaN in a group makes its result NaN (torch.amax, torch.amin).");
  fwd.inputs = {ops_a::Required("X")};
  fwd.outputs = {ops_a::Required("Out")};
  fwd.attrs = attrs;
  fwd.infer_shape = InferReduceMaxMin;
  fwd.reference_kernel = [max](ExecContext& ctx) { ReduceMaxMinKernel(ctx, max); };
  fwd.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X"}, {"Out"}, {"Out"}, {"X"})};
  };
  fwd.jit = JitLowering::kFramework;
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = type + "_grad";
  grad.doc = "Gradient of " + type +
             ": X@GRAD = Out@GRAD / k at the k elements of each group equal to Out (NaN matching NaN), 0 elsewhere";
  grad.inputs = {ops_a::Required("X"), ops_a::Required("Out"), ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = attrs;
  grad.infer_shape = InferReduceMaxMinGrad;
  grad.reference_kernel = ReduceMaxMinGrad;
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

}  // namespace

void RegisterReduceMaxMinOps(OpRegistry& r) {
  AddMaxMin(r, "reduce_max", /*max=*/true);
  AddMaxMin(r, "reduce_min", /*max=*/false);
}

}  // namespace kiln
