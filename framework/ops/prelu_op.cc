// prelu and its grad (Paddle's slots and modes): Out = X where X > 0, else
// Alpha * X, Alpha shared by all elements (mode "all"), one per channel
// ("channel": dim 1, or the last with data_format NHWC), or broadcast into X
// numpy-style from X's trailing dims ("element": Paddle's [1, C, H, W] and
// every slope shape ONNX PRelu allows). Alpha@GRAD sums over the elements
// that share a slope. Elementwise in the JIT: Alpha is a broadcast read and
// its gradient a sum.
#include <string>
#include <vector>

#include "framework/ew/ew_fragment.h"
#include "framework/op_registry.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// Alpha's dims padded to X's rank, by mode. Unknown (-1) X dims pass.
template <typename Ctx>
Dims AlphaDims(const Ctx& ctx, const Dims& x, const Dims& alpha) {
  const std::string& mode = ctx.template Attr<std::string>("mode");
  const int64_t n = Numel(alpha);
  Dims out(x.size(), 1);
  if (mode == "all") {
    if (n != 1) ctx.Fail("input Alpha: mode \"all\" expects one element, got ", DimsToString(alpha));
    return out;
  }
  if (mode == "channel") {
    const std::string& format = ctx.template Attr<std::string>("data_format");
    if (format != "NCHW" && format != "NHWC") {
      ctx.Fail("attribute data_format: expected \"NCHW\" or \"NHWC\", got \"", format, "\"");
    }
    if (x.size() < 2) ctx.Fail("input X: mode \"channel\" expects rank >= 2, got ", DimsToString(x));
    const size_t c = format == "NCHW" ? 1 : x.size() - 1;
    if (x[c] >= 0 && n != x[c]) {
      ctx.Fail("input Alpha: mode \"channel\" expects ", x[c], " elements (dim ", c, " of X ", DimsToString(x),
               "), got ", DimsToString(alpha));
    }
    out[c] = x[c] >= 0 ? x[c] : n;
    return out;
  }
  if (mode == "element") {
    // Alpha's dims line up with X's trailing ones; Alpha dims before X's first must be 1.
    const int64_t shift = static_cast<int64_t>(x.size()) - static_cast<int64_t>(alpha.size());
    for (size_t k = 0; k < alpha.size(); ++k) {
      const int64_t d = shift + static_cast<int64_t>(k);
      if (alpha[k] != 1 && (d < 0 || !DimCompatible(x[d], alpha[k]))) {
        ctx.Fail("input Alpha ", DimsToString(alpha), ": mode \"element\" expects it to broadcast into X ",
                 DimsToString(x), " from X's trailing dims (each dim X's or 1)");
      }
      if (d >= 0) out[d] = alpha[k];
    }
    return out;
  }
  ctx.Fail("attribute mode: expected \"all\", \"channel\" or \"element\", got \"", mode, "\"");
}

void InferPrelu(InferShapeContext& ctx) {
  const DataType dtype = ops::CheckFloatInput(ctx, "X");
  ops::CheckSameDtype(ctx, "Alpha", dtype, "X");
  const Dims x = ctx.InputDims("X");
  AlphaDims(ctx, x, ctx.InputDims("Alpha"));
  ctx.SetOutput("Out", x, dtype);
}

void PreluKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& alpha = ctx.Input("Alpha");
  const Dims ad = AlphaDims(ctx, x.dims(), alpha.dims());
  Tensor* out = ctx.Output("Out");
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *ap = alpha.data<T>();
    T* o = out->mutable_data<T>();
    ops_a::ForEachBroadcast(ops_a::MakeBroadcastLoops(x.dims(), ad),
                            [&](int64_t i, int64_t j) { o[i] = xp[i] > T(0) ? xp[i] : ap[j] * xp[i]; });
  });
}

void InferPreluGrad(InferShapeContext& ctx) {
  const DataType dtype = ops::CheckFloatInput(ctx, "X");
  ops::CheckSameDtype(ctx, "Alpha", dtype, "X");
  const Dims x = ctx.InputDims("X");
  AlphaDims(ctx, x, ctx.InputDims("Alpha"));
  const std::string dout = GradVarName("Out");
  if (!ctx.HasInput(dout)) ctx.Fail("input ", dout, " is required (it gives X@GRAD its values)");
  ops::CheckSameDtype(ctx, dout, dtype, "X");
  ops_a::CheckSameDims(ctx, dout, x, "X");
  ctx.SetOutput(GradVarName("X"), x, dtype);
  ctx.SetOutput(GradVarName("Alpha"), ctx.InputDims("Alpha"), dtype);
}

void PreluGradKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& alpha = ctx.Input("Alpha");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  Tensor* dalpha = ctx.OutputOrNull(GradVarName("Alpha"));
  const auto loops = ops_a::MakeBroadcastLoops(x.dims(), AlphaDims(ctx, x.dims(), alpha.dims()));
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *ap = alpha.data<T>(), *g = dout.data<T>();
    if (dx != nullptr) {
      T* p = dx->mutable_data<T>();
      ops_a::ForEachBroadcast(loops, [&](int64_t i, int64_t j) { p[i] = xp[i] > T(0) ? g[i] : ap[j] * g[i]; });
    }
    if (dalpha != nullptr) {
      std::vector<double> acc(static_cast<size_t>(loops.y_numel), 0.0);
      ops_a::ForEachBroadcast(loops, [&](int64_t i, int64_t j) {
        if (!(xp[i] > T(0))) acc[j] += xp[i] * g[i];
      });
      T* p = dalpha->mutable_data<T>();
      for (size_t j = 0; j < acc.size(); ++j) p[j] = static_cast<T>(acc[j]);
    }
  });
}

// The JIT's forms over X's dims, Alpha (and Alpha@GRAD) at its padded dims.
std::vector<EwFragment> EwPrelu(const EwOpView& v, bool grad) {
  const std::string x = v.In("X"), alpha = v.In("Alpha"), dout = v.In(GradVarName("Out"));
  const std::string out = v.Out("Out"), dx = v.Out(GradVarName("X")), dalpha = v.Out(GradVarName("Alpha"));
  if (x.empty() || alpha.empty()) return {};
  if (grad ? (dout.empty() || (dx.empty() && dalpha.empty())) : out.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  const Dims ad = AlphaDims(ops::EwOpContext(v), f.iter, v.DimsOf(alpha));
  f.reads = {v.Full(x), {alpha, ad}};
  if (!grad) {
    f.writes = {v.Full(out)};
    f.emit = [](EwProgram& p, const std::vector<EwValue>& in) {
      const EwValue pos = p.Gt(in[0], p.Const(0.0f));
      return std::vector<EwValue>{p.Select(pos, in[0], p.Mul(in[1], in[0]))};
    };
    return {f};
  }
  f.reads.push_back(v.Full(dout));
  if (!dx.empty()) f.writes.push_back(v.Full(dx));
  if (!dalpha.empty()) f.writes.push_back({dalpha, ad});
  f.emit = [want_dx = !dx.empty(), want_da = !dalpha.empty()](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue x = in[0], a = in[1], g = in[2], zero = p.Const(0.0f);
    const EwValue pos = p.Gt(x, zero);
    std::vector<EwValue> outs;
    if (want_dx) outs.push_back(p.Select(pos, g, p.Mul(a, g)));
    if (want_da) outs.push_back(p.Select(pos, zero, p.Mul(x, g)));
    return outs;
  };
  return {f};
}

}  // namespace

void RegisterPreluOps(OpRegistry& r) {
  const std::vector<AttrDef> attrs = {{"mode", AttrKind::kString, Attribute(std::string("all"))},
                                      {"data_format", AttrKind::kString, Attribute(std::string("NCHW"))}};
  OpInfo op;
  op.type = "prelu";
  op.doc =
      "Out = X where X > 0, else Alpha * X (NaN stays NaN). mode \"all\": Alpha has one element; \"channel\": one "
      "per channel (dim 1 of X, the last with data_format \"NHWC\"), any shape with that many elements; "
      "\"element\": Alpha broadcasts into X from its trailing dims, numpy's way (Paddle's [1, C, H, W], and every "
      "slope shape ONNX PRelu allows). f32, f64";
  op.inputs = {ops_a::Required("X"), ops_a::Required("Alpha")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = attrs;
  op.infer_shape = InferPrelu;
  op.reference_kernel = PreluKernel;
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"X", "Alpha"}, {}, {"Out"}, {"X", "Alpha"})};
  };
  op.jit = JitLowering::kElementwise;
  op.elementwise = [](const EwOpView& v) { return EwPrelu(v, false); };
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "prelu_grad";
  grad.doc =
      "Gradient of prelu: X@GRAD = Out@GRAD where X > 0, else Alpha * Out@GRAD; Alpha@GRAD = the sum of X * "
      "Out@GRAD over the elements with X <= 0 that share each slope";
  grad.inputs = {ops_a::Required("X"), ops_a::Required("Alpha"), ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X")), ops_a::Optional(GradVarName("Alpha"))};
  grad.attrs = attrs;
  grad.infer_shape = InferPreluGrad;
  grad.reference_kernel = PreluGradKernel;
  grad.jit = JitLowering::kElementwise;
  grad.elementwise = [](const EwOpView& v) { return EwPrelu(v, true); };
  r.Add(std::move(grad));
}

}  // namespace kiln
