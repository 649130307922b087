// pad and pad_grad: X extended (or cut, for negative paddings) along every
// dim, the new elements pad_value (constant), X's mirror image without the
// edge (reflect, numpy's and ONNX's), or the nearest edge element (edge).
// Paddle's pad op with paddings [before_0, after_0, before_1, after_1, ...]
// and pad_value, plus a mode. The grad sums Out@GRAD into the X elements
// each Out element was read from, in every mode. JIT: framework.
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

enum class PadMode { kConstant, kReflect, kEdge };

template <typename Ctx>
PadMode ModeOf(const Ctx& ctx) {
  const std::string& m = ctx.template Attr<std::string>("mode");
  if (m == "constant") return PadMode::kConstant;
  if (m == "reflect") return PadMode::kReflect;
  if (m == "edge") return PadMode::kEdge;
  ctx.Fail("attribute mode: expected \"constant\", \"reflect\" or \"edge\", got \"", m, "\"");
}

// Out's dims (unknown where X's are); checks paddings' length, the sizes and
// that reflect and edge have an element to read in every padded dim.
template <typename Ctx>
Dims PadOutDims(const Ctx& ctx, const Dims& x) {
  const auto& p = ctx.template Attr<std::vector<int64_t>>("paddings");
  if (p.size() != 2 * x.size()) {
    ctx.Fail("attribute paddings: expected ", 2 * x.size(), " values (before and after for each of X's ", x.size(),
             " dims), got ", p.size());
  }
  const PadMode mode = ModeOf(ctx);
  Dims out(x.size());
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] < 0) {
      out[d] = -1;
      continue;
    }
    out[d] = x[d] + p[2 * d] + p[2 * d + 1];
    if (out[d] < 0) {
      ctx.Fail("attribute paddings: dim ", d, " of X is ", x[d], " and paddings ", p[2 * d], ", ", p[2 * d + 1],
               " leave ", out[d], " elements");
    }
    if (mode != PadMode::kConstant && x[d] == 0 && out[d] > 0) {
      ctx.Fail("input X: dim ", d, " is empty, and mode \"", ctx.template Attr<std::string>("mode"),
               "\" pads it from X's elements");
    }
  }
  return out;
}

// Along one dim: the X index Out index o reads, or -1 for pad_value.
int64_t SourceIndex(int64_t o, int64_t before, int64_t n, PadMode mode) {
  int64_t i = o - before;
  if (i >= 0 && i < n) return i;
  if (mode == PadMode::kConstant) return -1;
  if (mode == PadMode::kEdge || n == 1) return i < 0 ? 0 : n - 1;
  // reflect: period 2(n - 1), folded back into [0, n).
  const int64_t period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// Calls fn(i, j) for every flat index i of Out and the flat index j of X it
// reads (-1 for pad_value).
template <typename Ctx, typename Fn>
void ForEachPadded(const Ctx& ctx, const Dims& x, const Dims& out, Fn&& fn) {
  const auto& p = ctx.template Attr<std::vector<int64_t>>("paddings");
  const PadMode mode = ModeOf(ctx);
  const size_t r = x.size();
  const std::vector<int64_t> xs = Strides(x);
  // Per dim, the source offset (in elements of X) of each Out index, or -1.
  std::vector<std::vector<int64_t>> src(r);
  for (size_t d = 0; d < r; ++d) {
    src[d].resize(static_cast<size_t>(out[d]));
    for (int64_t o = 0; o < out[d]; ++o) {
      const int64_t s = SourceIndex(o, p[2 * d], x[d], mode);
      src[d][o] = s < 0 ? -1 : s * xs[d];
    }
  }
  const int64_t n = Numel(out);
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = 0;
    for (size_t d = 0; d < r && j >= 0; ++d) {
      const int64_t s = src[d][idx[d]];
      j = s < 0 ? -1 : j + s;
    }
    fn(i, j);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

void InferPad(InferShapeContext& ctx) {
  ctx.SetOutput("Out", PadOutDims(ctx, ctx.InputDims("X")), ctx.InputDtype("X"));
}

void PadKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Dims out_dims = PadOutDims(ctx, x.dims());
  Tensor* out = ctx.Output("Out");
  const double value = ctx.Attr<float>("pad_value");
  ops::DispatchAll(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* o = out->mutable_data<T>();
    const T v = static_cast<T>(value);
    ForEachPadded(ctx, x.dims(), out_dims, [&](int64_t i, int64_t j) { o[i] = j < 0 ? v : xp[j]; });
  });
}

void InferPadGrad(InferShapeContext& ctx) {
  const std::string dout = GradVarName("Out");
  if (!ctx.HasInput(dout)) ctx.Fail("input ", dout, " is required (it gives X@GRAD its values)");
  const DataType dtype = ops::CheckFloatInput(ctx, dout);
  ops::CheckSameDtype(ctx, "X", dtype, dout);
  const Dims x = ctx.InputDims("X");
  ops_a::CheckSameDims(ctx, dout, PadOutDims(ctx, x), "Out");
  ctx.SetOutput(GradVarName("X"), x, dtype);
}

void PadGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr) return;
  const Dims x = ctx.InputMeta("X").dims();
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  ops_a::DispatchFloat(ctx, dout.dtype(), "input Out@GRAD", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    std::vector<double> acc(static_cast<size_t>(Numel(x)), 0.0);
    ForEachPadded(ctx, x, dout.dims(), [&](int64_t i, int64_t j) {
      if (j >= 0) acc[j] += g[i];
    });
    T* p = dx->mutable_data<T>();
    for (size_t j = 0; j < acc.size(); ++j) p[j] = static_cast<T>(acc[j]);
  });
}

}  // namespace

void RegisterPadOps(OpRegistry& r) {
  const std::vector<AttrDef> attrs = {{"paddings", AttrKind::kInts, std::nullopt},
                                      {"pad_value", AttrKind::kFloat, Attribute(0.0f)},
                                      {"mode", AttrKind::kString, Attribute(std::string("constant"))}};
  OpInfo op;
  op.type = "pad";
  op.doc =
      "Out = X padded along each dim d by paddings[2d] elements before and paddings[2d+1] after (negative ones "
      "cut X, as ONNX Pad's; ONNX lists all befores first). mode \"constant\": the new elements are pad_value "
      "(converted to X's dtype); \"reflect\": X mirrored without repeating its edge (numpy's reflect, repeated "
      "for paddings longer than the dim); \"edge\": the nearest edge element. Any dtype. JIT: framework";
  op.inputs = {ops_a::Required("X")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = attrs;
  op.infer_shape = InferPad;
  op.reference_kernel = PadKernel;
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"X"}, {}, {"Out"}, {"X"})};
  };
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "pad_grad";
  grad.doc =
      "Gradient of pad, every mode: X@GRAD[j] = the sum of Out@GRAD over the Out elements that read X[j] (the "
      "slice of Out@GRAD for constant mode). JIT: framework";
  grad.inputs = {ops_a::Required("X"), ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X"))};
  grad.attrs = attrs;
  grad.infer_shape = InferPadGrad;
  grad.reference_kernel = PadGradKernel;
  grad.no_need_buffer = {"X"};
  grad.jit = JitLowering::kFramework;
  r.Add(std::move(grad));
}

}  // namespace kiln
