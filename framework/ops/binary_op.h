// The registry entries of binary elementwise ops beyond add/sub/mul/div
// (elementwise_max, _min, _pow, _mod) from one functor each: Y broadcast
// into X from `axis` as the elementwise ops do (BroadcastYDims), f32, f64,
// i64 and i32 forwards, f32/f64 grads whose Y@GRAD sums over Y's broadcast
// dims, and the JIT's elementwise lowering of both where the functor has one.
//
// A functor Op is constructed from the op's attrs (an ExecContext or the
// JIT's EwOpView) and has
//   template <typename T> T Fwd(T x, T y) const;      // for float, double, int64_t, int32_t
//   template <typename T> T Dx(T x, T y, T dout) const;  // X@GRAD's term (float, double;
//   template <typename T> T Dy(T x, T y, T dout) const;  //   Y@GRAD's before the sum), with a grad
//   EwValue Ew(EwProgram&, EwValue x, EwValue y) const;  // optional: without it, kFramework
//   EwValue EwDx(EwProgram&, EwValue g, EwValue x, EwValue y) const;  // with Ew
//   EwValue EwDy(EwProgram&, EwValue g, EwValue x, EwValue y) const;
// and optionally `template <typename T> void CheckY(const ExecContext&, const
// T* y, int64_t n) const`, which refuses Y values the op cannot take (an
// integer divisor of 0), naming the element.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"

namespace kiln::binary_op {

template <typename Op, typename = void>
struct HasEw : std::false_type {};
template <typename Op>
struct HasEw<Op, std::void_t<decltype(std::declval<const Op&>().Ew(std::declval<EwProgram&>(), EwValue{}, EwValue{}))>>
    : std::true_type {};

template <typename Op, typename T, typename = void>
struct HasCheckY : std::false_type {};
template <typename Op, typename T>
struct HasCheckY<Op, T,
                 std::void_t<decltype(std::declval<const Op&>().CheckY(std::declval<const ExecContext&>(),
                                                                        std::declval<const T*>(), int64_t{}))>>
    : std::true_type {};

// Runs Op::CheckY (division's zero check) where Op has one. A function of its own: clang 14
// instantiates a discarded `if constexpr` branch inside a generic lambda.
template <typename Op, typename T>
void CheckYIfAny(const Op& op, const ExecContext& ctx, const T* y, int64_t n) {
  if constexpr (HasCheckY<Op, T>::value) op.CheckY(ctx, y, n);
}

inline void InferBinary(InferShapeContext& ctx) {
  const DataType dtype =
      ops::CheckInputDtype(ctx, "X", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32});
  ops::CheckSameDtype(ctx, "Y", dtype, "X");
  const Dims x = ctx.InputDims("X");
  BroadcastYDims(x, ctx.InputDims("Y"), ctx.Attr<int64_t>("axis"), ctx.OpName());
  ctx.SetOutput("Out", x, dtype);
}

template <typename Op>
void BinaryKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  if (y.dtype() != x.dtype()) {
    ctx.Fail("input Y: expected dtype ", DataTypeName(x.dtype()), " (as X), got ", DataTypeName(y.dtype()));
  }
  const Dims ypad = BroadcastYDims(x.dims(), y.dims(), ctx.Attr<int64_t>("axis"), ctx.OpName());
  Tensor* out = ctx.Output("Out");
  const Op op(ctx);
  ops::DispatchNumeric(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* yp = y.data<T>();
    CheckYIfAny(op, ctx, yp, y.numel());
    // Out may share X's buffer (in place): each element is read before it is written.
    T* o = out->mutable_data<T>();
    const T* xp = x.data<T>();
    ops_a::ForEachBroadcast(ops_a::MakeBroadcastLoops(x.dims(), ypad),
                            [&](int64_t i, int64_t j) { o[i] = op.template Fwd<T>(xp[i], yp[j]); });
  });
}

// Grad inputs X, Y, Out@GRAD (required: it gives X@GRAD its dims).
inline void InferBinaryGrad(InferShapeContext& ctx) {
  const std::string dout = GradVarName("Out");
  if (!ctx.HasInput(dout)) ctx.Fail("input ", dout, " is required (it gives X@GRAD its dims)");
  const DataType dtype = ops::CheckFloatInput(ctx, "X");
  ops::CheckSameDtype(ctx, "Y", dtype, "X");
  ops::CheckSameDtype(ctx, dout, dtype, "X");
  const Dims x = ctx.InputDims("X");
  ops_a::CheckSameDims(ctx, dout, x, "X");
  const Dims y = ctx.InputDims("Y");
  BroadcastYDims(x, y, ctx.Attr<int64_t>("axis"), ctx.OpName());
  ctx.SetOutput(GradVarName("X"), x, dtype);
  ctx.SetOutput(GradVarName("Y"), y, dtype);
}

template <typename Op>
void BinaryGradKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  Tensor* dy = ctx.OutputOrNull(GradVarName("Y"));
  const Dims ypad = BroadcastYDims(x.dims(), y.dims(), ctx.Attr<int64_t>("axis"), ctx.OpName());
  const auto loops = ops_a::MakeBroadcastLoops(x.dims(), ypad);
  const Op op(ctx);
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    const T* g = dout.data<T>();
    if (dx != nullptr) {
      T* p = dx->mutable_data<T>();
      ops_a::ForEachBroadcast(loops, [&](int64_t i, int64_t j) { p[i] = op.template Dx<T>(xp[i], yp[j], g[i]); });
    }
    if (dy != nullptr) {
      // Accumulate in double: a broadcast Y may gather many terms.
      std::vector<double> acc(static_cast<size_t>(loops.y_numel), 0.0);
      ops_a::ForEachBroadcast(loops, [&](int64_t i, int64_t j) { acc[j] += op.template Dy<T>(xp[i], yp[j], g[i]); });
      T* p = dy->mutable_data<T>();
      for (size_t j = 0; j < acc.size(); ++j) p[j] = static_cast<T>(acc[j]);
    }
  });
}

// The JIT's forms: one fragment over X's dims, Y read (and its gradient
// summed) along its broadcast dims.
template <typename Op>
std::vector<EwFragment> EwForward(const EwOpView& v) {
  const std::string x = v.In("X"), y = v.In("Y"), out = v.Out("Out");
  if (x.empty() || y.empty() || out.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(x), {y, BroadcastYDims(f.iter, v.DimsOf(y), v.Attr<int64_t>("axis"), v.op().type())}};
  f.writes = {v.Full(out)};
  f.emit = [op = Op(v)](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{op.Ew(p, in[0], in[1])};
  };
  return {f};
}

template <typename Op>
std::vector<EwFragment> EwBackward(const EwOpView& v) {
  const std::string x = v.In("X"), y = v.In("Y"), dout = v.In(GradVarName("Out"));
  const std::string dx = v.Out(GradVarName("X")), dy = v.Out(GradVarName("Y"));
  if (x.empty() || y.empty() || dout.empty() || (dx.empty() && dy.empty())) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  const Dims yd = BroadcastYDims(f.iter, v.DimsOf(y), v.Attr<int64_t>("axis"), v.op().type());
  f.reads = {v.Full(dout), v.Full(x), {y, yd}};
  if (!dx.empty()) f.writes.push_back(v.Full(dx));
  if (!dy.empty()) f.writes.push_back({dy, yd});
  f.emit = [op = Op(v), want_dx = !dx.empty(), want_dy = !dy.empty()](EwProgram& p, const std::vector<EwValue>& in) {
    std::vector<EwValue> out;
    if (want_dx) out.push_back(op.EwDx(p, in[0], in[1], in[2]));
    if (want_dy) out.push_back(op.EwDy(p, in[0], in[1], in[2]));
    return out;
  };
  return {f};
}

// The entry of `type` (with `attrs` after axis) without a grad.
template <typename Op>
OpInfo BinaryForwardInfo(const std::string& type, const std::string& doc, std::vector<AttrDef> attrs) {
  attrs.insert(attrs.begin(), AttrDef{"axis", AttrKind::kInt, Attribute(int64_t{-1})});
  OpInfo fwd;
  fwd.type = type;
  fwd.doc = doc;
  fwd.inputs = {ops_a::Required("X"), ops_a::Required("Y")};
  fwd.outputs = {ops_a::Required("Out")};
  fwd.attrs = std::move(attrs);
  fwd.infer_shape = InferBinary;
  fwd.reference_kernel = BinaryKernel<Op>;
  fwd.inplace = {{"X", "Out"}};
  fwd.jit = JitLowering::kFramework;
  if constexpr (HasEw<Op>::value) {
    fwd.jit = JitLowering::kElementwise;
    fwd.elementwise = EwForward<Op>;
  }
  return fwd;
}

// Registers `type` and `type`_grad (which reads X, Y and Out@GRAD).
template <typename Op>
void RegisterBinaryOp(OpRegistry& r, const std::string& type, const std::string& doc, std::vector<AttrDef> attrs,
                      const std::string& grad_doc) {
  OpInfo fwd = BinaryForwardInfo<Op>(type, doc, std::move(attrs));
  fwd.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X", "Y"}, {}, {"Out"}, {"X", "Y"})};
  };
  OpInfo grad;
  grad.type = type + "_grad";
  grad.doc = grad_doc;
  grad.inputs = {ops_a::Required("X"), ops_a::Required("Y"), ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X")), ops_a::Optional(GradVarName("Y"))};
  grad.attrs = fwd.attrs;
  grad.infer_shape = InferBinaryGrad;
  grad.reference_kernel = BinaryGradKernel<Op>;
  grad.jit = JitLowering::kFramework;
  if constexpr (HasEw<Op>::value) {
    grad.jit = JitLowering::kElementwise;
    grad.elementwise = EwBackward<Op>;
  }
  r.Add(std::move(fwd));
  r.Add(std::move(grad));
}

}  // namespace kiln::binary_op
