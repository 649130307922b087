// tile and expand_v2 and their grads (Paddle's names and attributes):
// copies of X repeated along its dims, by whole tiles (tile) or by
// broadcasting size-1 dims (expand_v2, numpy's rule). The grads sum Out@GRAD
// back onto X. expand_v2 is a broadcast read, so the JIT lowers it (and its
// grad, a sum) into generated kernels; tile's periodic index is not a
// broadcast: framework.
#include <algorithm>
#include <string>
#include <vector>

#include "framework/ew/ew_fragment.h"
#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// X's dims padded with leading 1s to `rank`.
Dims PadLeading(const Dims& x, size_t rank) {
  Dims out(rank - x.size(), 1);
  out.insert(out.end(), x.begin(), x.end());
  return out;
}

// Fails unless every entry of attr `name` is >= `min`.
void CheckAttrValues(const InferShapeContext& ctx, const std::string& name, int64_t min) {
  const auto& v = ctx.Attr<std::vector<int64_t>>(name);
  for (size_t k = 0; k < v.size(); ++k) {
    if (v[k] < min) ctx.Fail("attribute ", name, ": expected values >= ", min, ", got ", v[k], " at index ", k);
  }
}

// Out@GRAD (required), with `want` dims; X@GRAD gets X's dims (X is read for them only).
void InferSumBackGrad(InferShapeContext& ctx, const Dims& want) {
  const std::string dout = GradVarName("Out");
  if (!ctx.HasInput(dout)) ctx.Fail("input ", dout, " is required (it gives X@GRAD its values)");
  const DataType dtype = ops::CheckFloatInput(ctx, dout);
  ops::CheckSameDtype(ctx, "X", dtype, dout);
  ops_a::CheckSameDims(ctx, dout, want, "Out");
  ctx.SetOutput(GradVarName("X"), ctx.InputDims("X"), dtype);
}

// ---- tile -------------------------------------------------------------------------------
// Out dim d = X's dim d * repeat_times[d], both padded with leading 1s to
// the longer of the two.
struct TileDims {
  Dims x, out;
};
template <typename Ctx>
TileDims TileShapes(const Ctx& ctx, const Dims& x) {
  const auto& reps = ctx.template Attr<std::vector<int64_t>>("repeat_times");
  const size_t rank = std::max(x.size(), reps.size());
  TileDims t{PadLeading(x, rank), PadLeading(reps, rank)};
  for (size_t d = 0; d < rank; ++d) t.out[d] = t.x[d] < 0 ? -1 : t.x[d] * t.out[d];
  return t;
}

// Calls fn(i, j) for every flat index i of Out and the flat index j of the X
// element it repeats: Out's index o in dim d reads X's o mod x[d].
template <typename Fn>
void ForEachTiled(const Dims& out, const Dims& x, Fn&& fn) {
  const int64_t n = Numel(out);
  if (n == 0) return;
  const size_t r = out.size();
  const std::vector<int64_t> xs = Strides(x);
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = 0;
    for (size_t d = 0; d < r; ++d) j += (idx[d] % x[d]) * xs[d];
    fn(i, j);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

void InferTile(InferShapeContext& ctx) {
  CheckAttrValues(ctx, "repeat_times", 0);
  ctx.SetOutput("Out", TileShapes(ctx, ctx.InputDims("X")).out, ctx.InputDtype("X"));
}

void TileKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const TileDims t = TileShapes(ctx, x.dims());
  Tensor* out = ctx.Output("Out");
  ops::DispatchAll(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* o = out->mutable_data<T>();
    ForEachTiled(t.out, t.x, [&](int64_t i, int64_t j) { o[i] = xp[j]; });
  });
}

void InferTileGrad(InferShapeContext& ctx) { InferSumBackGrad(ctx, TileShapes(ctx, ctx.InputDims("X")).out); }

void TileGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const TileDims t = TileShapes(ctx, ctx.InputMeta("X").dims());
  ops_a::DispatchFloat(ctx, dout.dtype(), "input Out@GRAD", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    std::vector<double> acc(static_cast<size_t>(Numel(t.x)), 0.0);
    ForEachTiled(t.out, t.x, [&](int64_t i, int64_t j) { acc[j] += g[i]; });
    T* p = dx->mutable_data<T>();
    for (size_t j = 0; j < acc.size(); ++j) p[j] = static_cast<T>(acc[j]);
  });
}

// ---- expand_v2 --------------------------------------------------------------------------
// numpy's broadcast of X against attr shape (both padded with leading dims
// to the longer): -1 keeps X's dim (not in a dim X lacks), a dim of X that
// is 1 takes the shape's, a shape entry of 1 keeps X's (ONNX Expand's
// bidirectional rule); other differences are errors. Returns X's padded dims
// and Out's dims; at build time an unknown X dim gives an unknown Out dim.
template <typename Ctx>
TileDims ExpandShapes(const Ctx& ctx, const Dims& x) {
  const auto& shape = ctx.template Attr<std::vector<int64_t>>("shape");
  const size_t rank = std::max(x.size(), shape.size());
  const size_t new_dims = rank - x.size();
  TileDims t{PadLeading(x, rank), Dims(rank - shape.size(), -1)};
  t.out.insert(t.out.end(), shape.begin(), shape.end());
  for (size_t d = 0; d < rank; ++d) {
    const int64_t xd = t.x[d], s = t.out[d];
    if (s < -1) ctx.Fail("attribute shape: expected sizes >= -1, got ", s, " for dim ", d);
    if (s == -1 && d < new_dims && rank - d <= shape.size()) {
      ctx.Fail("attribute shape: -1 (keep X's size) in dim ", d, ", which X [rank ", x.size(), "] does not have");
    }
    if (s == -1 || s == 1 || xd == s) {
      t.out[d] = s == -1 || s == 1 ? xd : s;
    } else if (xd == 1 || xd < 0) {
      t.out[d] = s;
    } else {
      ctx.Fail("input X ", DimsToString(x), " does not expand to attribute shape ", DimsToString(shape), ": dim ", d,
               " is ", xd, ", expected 1 or ", s);
    }
  }
  return t;
}

void InferExpand(InferShapeContext& ctx) {
  ctx.SetOutput("Out", ExpandShapes(ctx, ctx.InputDims("X")).out, ctx.InputDtype("X"));
}

void ExpandKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const TileDims t = ExpandShapes(ctx, x.dims());
  Tensor* out = ctx.Output("Out");
  ops::DispatchAll(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* o = out->mutable_data<T>();
    ops_a::ForEachBroadcast(ops_a::MakeBroadcastLoops(t.out, t.x), [&](int64_t i, int64_t j) { o[i] = xp[j]; });
  });
}

void InferExpandGrad(InferShapeContext& ctx) { InferSumBackGrad(ctx, ExpandShapes(ctx, ctx.InputDims("X")).out); }

void ExpandGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const TileDims t = ExpandShapes(ctx, ctx.InputMeta("X").dims());
  ops_a::DispatchFloat(ctx, dout.dtype(), "input Out@GRAD", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    std::vector<double> acc(static_cast<size_t>(Numel(t.x)), 0.0);
    ops_a::ForEachBroadcast(ops_a::MakeBroadcastLoops(t.out, t.x), [&](int64_t i, int64_t j) { acc[j] += g[i]; });
    T* p = dx->mutable_data<T>();
    for (size_t j = 0; j < acc.size(); ++j) p[j] = static_cast<T>(acc[j]);
  });
}

// The JIT's forms over Out's dims: X read along its broadcast dims (the
// forward), Out@GRAD summed into X@GRAD along them (the grad). None for an
// empty Out.
std::vector<EwFragment> EwExpand(const EwOpView& v, bool grad) {
  const std::string x = v.In("X");
  const std::string src = grad ? v.In(GradVarName("Out")) : x;
  const std::string dst = grad ? v.Out(GradVarName("X")) : v.Out("Out");
  if (x.empty() || src.empty() || dst.empty()) return {};
  const TileDims t = ExpandShapes(ops::EwOpContext(v), v.DimsOf(x));
  if (Numel(t.out) == 0) return {};
  EwFragment f;
  f.iter = t.out;
  f.reads = {grad ? EwAccess{src, t.out} : EwAccess{x, t.x}};
  f.writes = {grad ? EwAccess{dst, t.x} : EwAccess{dst, t.out}};
  f.emit = [](EwProgram&, const std::vector<EwValue>& in) { return std::vector<EwValue>{in[0]}; };
  return {f};
}

void AddSumBackGrad(OpRegistry& r, const std::string& type, const std::string& doc, std::vector<AttrDef> attrs,
                    InferShapeFn infer, KernelFn kernel) {
  OpInfo grad;
  grad.type = type;
  grad.doc = doc;
  grad.inputs = {ops_a::Required("X"), ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = std::move(attrs);
  grad.infer_shape = std::move(infer);
  grad.reference_kernel = std::move(kernel);
  grad.no_need_buffer = {"X"};
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

OpInfo Forward(const std::string& type, const std::string& doc, std::vector<AttrDef> attrs, InferShapeFn infer,
               KernelFn kernel) {
  OpInfo op;
  op.type = type;
  op.doc = doc;
  op.inputs = {ops_a::Required("X")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = std::move(attrs);
  op.infer_shape = std::move(infer);
  op.reference_kernel = std::move(kernel);
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"X"}, {}, {"Out"}, {"X"})};
  };
  op.jit = JitLowering::kFramework;
  return op;
}

}  // namespace

void RegisterTileExpandOps(OpRegistry& r) {
  const std::vector<AttrDef> tile_attrs = {{"repeat_times", AttrKind::kInts, std::nullopt}};
  r.Add(Forward("tile",
                "Out = X repeated repeat_times[d] times along each dim d (X's dims and repeat_times padded with "
                "leading 1s to the longer; a 0 gives an empty dim); any dtype. JIT: framework (a periodic read, "
                "not a broadcast)",
                tile_attrs, InferTile, TileKernel));
  AddSumBackGrad(r, "tile_grad",
                 "Gradient of tile: X@GRAD[j] = the sum of Out@GRAD over the copies of X[j]. JIT: framework",
                 tile_attrs, InferTileGrad, TileGradKernel);

  const std::vector<AttrDef> expand_attrs = {{"shape", AttrKind::kInts, std::nullopt}};
  OpInfo expand = Forward(
      "expand_v2",
      "Out = X broadcast to attr shape, numpy's rule with both padded with leading dims to the longer: a shape "
      "entry of -1 keeps X's size (not in a dim X lacks), a size-1 dim of X takes the shape's size, a shape entry "
      "of 1 keeps X's size (ONNX Expand); any dtype. JIT: a generated kernel (a broadcast read) for f32 and bool",
      expand_attrs, InferExpand, ExpandKernel);
  expand.jit = JitLowering::kElementwise;
  expand.elementwise = [](const EwOpView& v) { return EwExpand(v, false); };
  r.Add(std::move(expand));
  AddSumBackGrad(r, "expand_v2_grad",
                 "Gradient of expand_v2: X@GRAD = Out@GRAD summed over the dims X was broadcast along. JIT: a "
                 "generated kernel (a sum reduction) for f32",
                 expand_attrs, InferExpandGrad, ExpandGradKernel);
  OpInfo* eg = r.FindMutable("expand_v2_grad");
  eg->jit = JitLowering::kElementwise;
  eg->elementwise = [](const EwOpView& v) { return EwExpand(v, true); };
}

}  // namespace kiln
