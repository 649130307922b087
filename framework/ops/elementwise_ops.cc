// elementwise_add/sub/mul/div and their grads. Y broadcasts into X as OPS.md
// says (BroadcastYDims); Out has X's dims. Y@GRAD sums Out@GRAD's
// contributions over the dims Y was broadcast along.
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_a::BroadcastLoops;
using ops_a::ForEachBroadcast;
using ops_a::MakeBroadcastLoops;

// Per-op scalar maths. dx/dy are d(out)/dx and d(out)/dy at (x, y). Ew* give
// the same for the JIT (EwProgram): the forward, and dOut's contribution to
// dX and dY (x and y are -1 for add/sub, whose grads read neither).
struct AddFn {
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Add(x, y); }
  static EwValue EwDx(EwProgram&, EwValue g, EwValue, EwValue) { return g; }
  static EwValue EwDy(EwProgram&, EwValue g, EwValue, EwValue) { return g; }
  template <typename T>
  static T Fwd(T x, T y) {
    return x + y;
  }
  template <typename T>
  static T Dx(T, T) {
    return T(1);
  }
  template <typename T>
  static T Dy(T, T) {
    return T(1);
  }
};
struct SubFn {
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Sub(x, y); }
  static EwValue EwDx(EwProgram&, EwValue g, EwValue, EwValue) { return g; }
  static EwValue EwDy(EwProgram& p, EwValue g, EwValue, EwValue) { return p.Neg(g); }
  template <typename T>
  static T Fwd(T x, T y) {
    return x - y;
  }
  template <typename T>
  static T Dx(T, T) {
    return T(1);
  }
  template <typename T>
  static T Dy(T, T) {
    return T(-1);
  }
};
struct MulFn {
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Mul(x, y); }
  static EwValue EwDx(EwProgram& p, EwValue g, EwValue, EwValue y) { return p.Mul(g, y); }
  static EwValue EwDy(EwProgram& p, EwValue g, EwValue x, EwValue) { return p.Mul(g, x); }
  template <typename T>
  static T Fwd(T x, T y) {
    return x * y;
  }
  template <typename T>
  static T Dx(T, T y) {
    return y;
  }
  template <typename T>
  static T Dy(T x, T) {
    return x;
  }
};
struct DivFn {
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Div(x, y); }
  static EwValue EwDx(EwProgram& p, EwValue g, EwValue, EwValue y) { return p.Div(g, y); }
  // d(x/y)/dy = -x/y^2
  static EwValue EwDy(EwProgram& p, EwValue g, EwValue x, EwValue y) {
    return p.Neg(p.Div(p.Mul(g, x), p.Mul(y, y)));
  }
  template <typename T>
  static T Fwd(T x, T y) {
    return x / y;
  }
  template <typename T>
  static T Dx(T, T y) {
    return T(1) / y;
  }
  template <typename T>
  static T Dy(T x, T y) {
    return -x / (y * y);
  }
};

void InferElementwise(InferShapeContext& ctx) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "X");
  ops_a::CheckSameDtype(ctx, "Y", dtype, "X");
  const Dims x = ctx.InputDims("X");
  BroadcastYDims(x, ctx.InputDims("Y"), ctx.Attr<int64_t>("axis"), ctx.OpName());
  ctx.SetOutput("Out", x, dtype);
}

template <typename Op>
void ElementwiseKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Dims ypad = BroadcastYDims(x.dims(), y.dims(), ctx.Attr<int64_t>("axis"), ctx.OpName());
  if (y.dtype() != x.dtype()) {
    ctx.Fail("input Y: expected dtype ", DataTypeName(x.dtype()), " (as X), got ", DataTypeName(y.dtype()));
  }
  Tensor* out = ctx.Output("Out");
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    // Out may share X's buffer (in place): each element is read before it is written.
    T* o = out->mutable_data<T>();
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    ForEachBroadcast(MakeBroadcastLoops(x.dims(), ypad), [&](int64_t i, int64_t j) { o[i] = Op::Fwd(xp[i], yp[j]); });
  });
}

// Grad inputs: Y (dims, and values for mul/div), X for mul/div, Out@GRAD.
// add/sub do not read X so that the forward op may run in place.
void InferElementwiseGrad(InferShapeContext& ctx, bool reads_x) {
  const std::string dout = GradVarName("Out");
  if (!ctx.HasInput(dout)) ctx.Fail("input ", dout, " is required (it gives X@GRAD its dims)");
  const DataType dtype = ops_a::CheckFloatInput(ctx, dout);
  const Dims x = ctx.InputDims(dout);
  const Dims y = ctx.InputDims("Y");
  ops_a::CheckSameDtype(ctx, "Y", dtype, dout);
  if (reads_x) {
    ops_a::CheckSameDtype(ctx, "X", dtype, dout);
    ops_a::CheckSameDims(ctx, "X", x, dout);
  }
  BroadcastYDims(x, y, ctx.Attr<int64_t>("axis"), ctx.OpName());
  ctx.SetOutput(GradVarName("X"), x, dtype);
  ctx.SetOutput(GradVarName("Y"), y, dtype);
}

template <typename Op>
void ElementwiseGradKernel(ExecContext& ctx, bool reads_x) {
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  // add/sub read neither X nor Y's values: Y is a no-need-buffer input there.
  const Tensor& y = reads_x ? ctx.Input("Y") : ctx.InputMeta("Y");
  const Tensor* x = reads_x ? &ctx.Input("X") : nullptr;
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  Tensor* dy = ctx.OutputOrNull(GradVarName("Y"));
  const Dims ypad = BroadcastYDims(dout.dims(), y.dims(), ctx.Attr<int64_t>("axis"), ctx.OpName());
  const BroadcastLoops loops = MakeBroadcastLoops(dout.dims(), ypad);
  ops_a::DispatchFloat(ctx, dout.dtype(), "input Out@GRAD", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    const T* yp = reads_x ? y.data<T>() : nullptr;
    const T* xp = x ? x->data<T>() : nullptr;
    // add/sub derivatives ignore x and y; pass 0 for them.
    auto xv = [&](int64_t i) { return xp ? xp[i] : T(0); };
    auto yv = [&](int64_t j) { return yp ? yp[j] : T(0); };
    if (dx != nullptr) {
      T* p = dx->mutable_data<T>();
      ForEachBroadcast(loops, [&](int64_t i, int64_t j) { p[i] = g[i] * Op::Dx(xv(i), yv(j)); });
    }
    if (dy != nullptr) {
      // Accumulate in double: a broadcast Y may gather many terms.
      std::vector<double> acc(static_cast<size_t>(loops.y_numel), 0.0);
      ForEachBroadcast(loops,
                       [&](int64_t i, int64_t j) { acc[j] += static_cast<double>(g[i] * Op::Dy(xv(i), yv(j))); });
      T* p = dy->mutable_data<T>();
      for (size_t j = 0; j < acc.size(); ++j) p[j] = static_cast<T>(acc[j]);
    }
  });
}

// The JIT's form: one fragment over X's (dOut's) dims, Y read (and its
// gradient summed) along its broadcast dims.
template <typename Op>
std::vector<EwFragment> EwForward(const EwOpView& v) {
  const std::string x = v.In("X"), y = v.In("Y"), out = v.Out("Out");
  if (x.empty() || y.empty() || out.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(x), {y, BroadcastYDims(f.iter, v.DimsOf(y), v.Attr<int64_t>("axis"), v.op().type())}};
  f.writes = {v.Full(out)};
  f.emit = [](EwProgram& p, const std::vector<EwValue>& in) { return std::vector<EwValue>{Op::Ew(p, in[0], in[1])}; };
  return {f};
}

template <typename Op>
std::vector<EwFragment> EwBackward(const EwOpView& v, bool reads_x) {
  const std::string dout = v.In(GradVarName("Out")), x = v.In("X"), y = v.In("Y");
  const std::string dx = v.Out(GradVarName("X")), dy = v.Out(GradVarName("Y"));
  if (dout.empty() || y.empty() || (dx.empty() && dy.empty()) || (reads_x && x.empty())) return {};
  EwFragment f;
  f.iter = v.DimsOf(dout);
  const Dims yd = BroadcastYDims(f.iter, v.DimsOf(y), v.Attr<int64_t>("axis"), v.op().type());
  // add/sub need only dOut: not reading X keeps it (often a matmul output)
  // from having to exist at all.
  f.reads = {v.Full(dout)};
  if (reads_x) f.reads.insert(f.reads.end(), {v.Full(x), {y, yd}});
  if (!dx.empty()) f.writes.push_back(v.Full(dx));
  if (!dy.empty()) f.writes.push_back({dy, yd});
  const bool want_dx = !dx.empty(), want_dy = !dy.empty();
  f.emit = [want_dx, want_dy, reads_x](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue g = in[0], xv = reads_x ? in[1] : -1, yv = reads_x ? in[2] : -1;
    std::vector<EwValue> out;
    // Both values first, then the list: the order the program has always had.
    const EwValue gx = Op::EwDx(p, g, xv, yv);
    const EwValue gy = Op::EwDy(p, g, xv, yv);
    if (want_dx) out.push_back(gx);
    if (want_dy) out.push_back(gy);
    return out;
  };
  return {f};
}

template <typename Op>
void RegisterOne(OpRegistry& r, const std::string& type, const std::string& doc, bool grad_reads_x) {
  const AttrDef axis{"axis", AttrKind::kInt, Attribute(int64_t{-1})};

  OpInfo fwd;
  fwd.type = type;
  fwd.doc = doc;
  fwd.inputs = {ops_a::Required("X"), ops_a::Required("Y")};
  fwd.outputs = {ops_a::Required("Out")};
  fwd.attrs = {axis};
  fwd.infer_shape = InferElementwise;
  fwd.reference_kernel = ElementwiseKernel<Op>;
  fwd.grad_maker = [grad_reads_x](const proto::OpDesc& op) {
    std::vector<std::string> reads = {"Y"};
    if (grad_reads_x) reads.insert(reads.begin(), "X");
    return std::vector<proto::OpDesc>{MakeGradOp(op, reads, {}, {"Out"}, {"X", "Y"})};
  };
  fwd.inplace = {{"X", "Out"}};
  fwd.jit = JitLowering::kElementwise;
  fwd.elementwise = EwForward<Op>;
  r.Add(std::move(fwd));

  OpInfo grad;
  grad.type = type + "_grad";
  grad.doc = "gradient of " + type + "; Y@GRAD is summed over Y's broadcast dims";
  grad.inputs = {ops_a::Required("Y"), ops_a::Optional(GradVarName("Out"))};
  if (grad_reads_x) grad.inputs.insert(grad.inputs.begin(), ops_a::Required("X"));
  grad.outputs = {ops_a::Optional(GradVarName("X")), ops_a::Optional(GradVarName("Y"))};
  grad.attrs = {axis};
  grad.infer_shape = [grad_reads_x](InferShapeContext& ctx) { InferElementwiseGrad(ctx, grad_reads_x); };
  grad.reference_kernel = [grad_reads_x](ExecContext& ctx) { ElementwiseGradKernel<Op>(ctx, grad_reads_x); };
  if (!grad_reads_x) grad.no_need_buffer = {"Y"};
  grad.jit = JitLowering::kElementwise;
  grad.elementwise = [grad_reads_x](const EwOpView& v) { return EwBackward<Op>(v, grad_reads_x); };
  r.Add(std::move(grad));
}

}  // namespace

void RegisterElementwiseOps(OpRegistry& r) {
  RegisterOne<AddFn>(r, "elementwise_add", "Out = X + Y, Y broadcast into X from axis", false);
  RegisterOne<SubFn>(r, "elementwise_sub", "Out = X - Y, Y broadcast into X from axis", false);
  RegisterOne<MulFn>(r, "elementwise_mul", "Out = X * Y, Y broadcast into X from axis", true);
  RegisterOne<DivFn>(r, "elementwise_div", "Out = X / Y, Y broadcast into X from axis", true);
}

}  // namespace kiln
