// The comparisons (less_than, less_equal, greater_than, greater_equal, equal,
// not_equal: bool Out, Y broadcast into X as the elementwise ops do) and where
// (Condition ? X : Y) with its gradient, and their elementwise JIT forms.
#include <string>
#include <vector>

#include "framework/ew/ew_fragment.h"
#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_a::ForEachBroadcast;
using ops_a::MakeBroadcastLoops;

// ---- comparisons ------------------------------------------------------------------------
// C++'s operators on floats are IEEE's: every comparison with a NaN is false,
// except !=. EwProgram's comparisons (Ew) are the same on float lanes.
struct LessThan {
  template <typename T>
  static bool Apply(T x, T y) {
    return x < y;
  }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Lt(x, y); }
};
struct LessEqual {
  template <typename T>
  static bool Apply(T x, T y) {
    return x <= y;
  }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Le(x, y); }
};
struct GreaterThan {
  template <typename T>
  static bool Apply(T x, T y) {
    return x > y;
  }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Gt(x, y); }
};
struct GreaterEqual {
  template <typename T>
  static bool Apply(T x, T y) {
    return x >= y;
  }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Ge(x, y); }
};
struct Equal {
  template <typename T>
  static bool Apply(T x, T y) {
    return x == y;
  }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Eq(x, y); }
};
struct NotEqual {
  template <typename T>
  static bool Apply(T x, T y) {
    return x != y;
  }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Ne(x, y); }
};

void InferCompare(InferShapeContext& ctx) {
  const DataType dtype = ops::CheckInputDtype(
      ctx, "X", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32, DataType::kBOOL});
  ops::CheckSameDtype(ctx, "Y", dtype, "X");
  const Dims x = ctx.InputDims("X");
  BroadcastYDims(x, ctx.InputDims("Y"), ctx.Attr<int64_t>("axis"), ctx.OpName());
  ctx.SetOutput("Out", x, DataType::kBOOL);
}

template <typename Cmp>
void CompareKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  if (y.dtype() != x.dtype()) {
    ctx.Fail("input Y: expected dtype ", DataTypeName(x.dtype()), " (as X), got ", DataTypeName(y.dtype()));
  }
  const Dims ypad = BroadcastYDims(x.dims(), y.dims(), ctx.Attr<int64_t>("axis"), ctx.OpName());
  bool* o = ctx.Output("Out")->mutable_data<bool>();
  ops::DispatchAll(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    ForEachBroadcast(MakeBroadcastLoops(x.dims(), ypad),
                     [&](int64_t i, int64_t j) { o[i] = Cmp::Apply(xp[i], yp[j]); });
  });
}

// The JIT's form, as the elementwise ops': one fragment over X's dims, Y read
// along its broadcast dims; Out's 0.0/1.0 is stored as bool bytes. None for
// X of a dtype generated kernels do not hold (f64, i64, i32).
template <typename Cmp>
std::vector<EwFragment> EwCompare(const EwOpView& v) {
  const std::string x = v.In("X"), y = v.In("Y"), out = v.Out("Out");
  if (x.empty() || y.empty() || out.empty() || !IsEwDtype(v.DtypeOf(x))) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(x), {y, BroadcastYDims(f.iter, v.DimsOf(y), v.Attr<int64_t>("axis"), v.op().type())}};
  f.writes = {v.Full(out)};
  f.emit = [](EwProgram& p, const std::vector<EwValue>& in) { return std::vector<EwValue>{Cmp::Ew(p, in[0], in[1])}; };
  return {f};
}

template <typename Cmp>
void AddCompare(OpRegistry& r, const std::string& type, const std::string& meaning) {
  OpInfo op;
  op.type = type;
  op.doc = "Out (bool) = " + meaning +
           " elementwise, Y broadcast into X from axis as in the elementwise ops; X and Y of one dtype (f32, f64, "
           "i64, i32, bool). A NaN compares as IEEE says (false, except for not_equal). Not differentiable (Out is "
           "bool, so append_backward sends no gradient through it). JIT: a generated kernel for f32 and bool X; f64, "
           "i64 and i32 run the framework kernel inside the cluster (the generated kernels hold f32 and bool only)";
  op.inputs = {ops_a::Required("X"), ops_a::Required("Y")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = {{"axis", AttrKind::kInt, Attribute(int64_t{-1})}};
  op.infer_shape = InferCompare;
  op.reference_kernel = CompareKernel<Cmp>;
  op.jit = JitLowering::kElementwise;
  op.elementwise = EwCompare<Cmp>;
  r.Add(std::move(op));
}

// ---- where --------------------------------------------------------------------------------

// Fails unless input `slot` has X's dims.
void CheckDimsAsX(const InferShapeContext& ctx, const std::string& slot, const Dims& x) {
  const Dims d = ctx.InputDims(slot);
  if (!DimsCompatible(d, x)) {
    ctx.Fail("input ", slot, ": expected dims ", DimsToString(x), " (as X; where does not broadcast), got ",
             DimsToString(d));
  }
}

void InferWhere(InferShapeContext& ctx) {
  ops::CheckInputDtype(ctx, "Condition", {DataType::kBOOL});
  const DataType dtype = ops::CheckInputDtype(
      ctx, "X", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32, DataType::kBOOL});
  ops::CheckSameDtype(ctx, "Y", dtype, "X");
  const Dims x = ctx.InputDims("X");
  CheckDimsAsX(ctx, "Y", x);
  CheckDimsAsX(ctx, "Condition", x);
  ctx.SetOutput("Out", x, dtype);
}

void WhereKernel(ExecContext& ctx) {
  const bool* c = ctx.Input("Condition").data<bool>();
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  Tensor* out = ctx.Output("Out");
  ops::DispatchAll(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    T* o = out->mutable_data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = c[i] ? xp[i] : yp[i];
  });
}

void InferWhereGrad(InferShapeContext& ctx) {
  ops::CheckInputDtype(ctx, "Condition", {DataType::kBOOL});
  const DataType dtype = ops::CheckFloatInput(ctx, "X");
  ops::CheckSameDtype(ctx, "Y", dtype, "X");
  const Dims x = ctx.InputDims("X");
  CheckDimsAsX(ctx, "Y", x);
  CheckDimsAsX(ctx, "Condition", x);
  const std::string dout = GradVarName("Out");
  if (ctx.HasInput(dout)) {
    ops::CheckSameDtype(ctx, dout, dtype, "X");
    CheckDimsAsX(ctx, dout, x);
  }
  ctx.SetOutput(GradVarName("X"), x, dtype);
  ctx.SetOutput(GradVarName("Y"), x, dtype);
}

// X@GRAD = Condition ? dOut : 0 and Y@GRAD = Condition ? 0 : dOut (zeros
// without dOut). X and Y are read for their dims only.
template <typename T>
void WhereGradKernel(ExecContext& ctx) {
  const bool* c = ctx.Input("Condition").data<bool>();
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  const int64_t n = ctx.InputMeta("X").numel();
  const T* g = dout != nullptr ? dout->data<T>() : nullptr;
  for (const auto& [slot, when] : {std::pair<std::string, bool>{GradVarName("X"), true}, {GradVarName("Y"), false}}) {
    Tensor* d = ctx.OutputOrNull(slot);
    if (d == nullptr) continue;
    T* p = d->mutable_data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = g != nullptr && c[i] == when ? g[i] : T(0);
  }
}

void WhereGrad(ExecContext& ctx) {
  const DataType dtype = ctx.InputMeta("X").dtype();
  if (dtype == DataType::kFP32) {
    WhereGradKernel<float>(ctx);
  } else if (dtype == DataType::kFP64) {
    WhereGradKernel<double>(ctx);
  } else {
    ctx.Fail("input X: expected dtype f32 or f64, got ", DataTypeName(dtype));
  }
}

// The JIT's forms: select(Condition, X, Y), the condition loaded as 0.0/1.0.
// None for X of a dtype generated kernels do not hold (f64, i64, i32).
std::vector<EwFragment> EwWhere(const EwOpView& v) {
  const std::string c = v.In("Condition"), x = v.In("X"), y = v.In("Y"), out = v.Out("Out");
  if (c.empty() || x.empty() || y.empty() || out.empty() || !IsEwDtype(v.DtypeOf(x))) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(c), v.Full(x), v.Full(y)};
  f.writes = {v.Full(out)};
  f.emit = [](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{p.Select(in[0], in[1], in[2])};
  };
  return {f};
}

// X@GRAD = select(Condition, dOut, 0), Y@GRAD = select(Condition, 0, dOut),
// zeros without dOut; X is read for its dims only. None for f64.
std::vector<EwFragment> EwWhereGrad(const EwOpView& v) {
  const std::string c = v.In("Condition"), x = v.In("X"), dout = v.In(GradVarName("Out"));
  const std::string dx = v.Out(GradVarName("X")), dy = v.Out(GradVarName("Y"));
  if (c.empty() || x.empty() || (dx.empty() && dy.empty()) || v.DtypeOf(x) != DataType::kFP32) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(c)};
  if (!dout.empty()) f.reads.push_back(v.Full(dout));
  if (!dx.empty()) f.writes.push_back(v.Full(dx));
  if (!dy.empty()) f.writes.push_back(v.Full(dy));
  const bool has_dout = !dout.empty(), want_dx = !dx.empty(), want_dy = !dy.empty();
  f.emit = [has_dout, want_dx, want_dy](EwProgram& p, const std::vector<EwValue>& in) {
    const EwValue zero = p.Const(0.0f);
    const EwValue g = has_dout ? in[1] : zero;
    std::vector<EwValue> out;
    if (want_dx) out.push_back(p.Select(in[0], g, zero));
    if (want_dy) out.push_back(p.Select(in[0], zero, g));
    return out;
  };
  return {f};
}

void AddWhere(OpRegistry& r) {
  OpInfo op;
  op.type = "where";
  op.doc =
      "Out = Condition ? X : Y elementwise; Condition (bool), X and Y have one shape (no broadcasting), X and Y "
      "one dtype (f32, f64, i64, i32, bool). Gradient (f32, f64): X@GRAD = Condition ? Out@GRAD : 0, Y@GRAD = "
      "Condition ? 0 : Out@GRAD; Condition gets none. JIT: a generated kernel for f32 and bool X; f64, i64 and i32 "
      "run the framework kernel inside the cluster (the generated kernels hold f32 and bool only)";
  op.inputs = {ops_a::Required("Condition"), ops_a::Required("X"), ops_a::Required("Y")};
  op.outputs = {ops_a::Required("Out")};
  op.infer_shape = InferWhere;
  op.reference_kernel = WhereKernel;
  op.grad_maker = [](const proto::OpDesc& fwd) {
    return std::vector<proto::OpDesc>{MakeGradOp(fwd, {"Condition", "X", "Y"}, {}, {"Out"}, {"X", "Y"})};
  };
  op.no_grad_inputs = {"Condition"};
  op.jit = JitLowering::kElementwise;
  op.elementwise = EwWhere;
  r.Add(std::move(op));

  OpInfo grad;
  grad.type = "where_grad";
  grad.doc =
      "Gradient of where: X@GRAD = Condition ? Out@GRAD : 0, Y@GRAD = Condition ? 0 : Out@GRAD. JIT: a generated "
      "kernel for f32; f64 runs the framework kernel inside the cluster";
  grad.inputs = {ops_a::Required("Condition"), ops_a::Required("X"), ops_a::Required("Y"),
                 ops_a::Optional(GradVarName("Out"))};
  grad.outputs = {ops_a::Optional(GradVarName("X")), ops_a::Optional(GradVarName("Y"))};
  grad.infer_shape = InferWhereGrad;
  grad.reference_kernel = WhereGrad;
  grad.no_need_buffer = {"X", "Y"};
  grad.jit = JitLowering::kElementwise;
  grad.elementwise = EwWhereGrad;
  r.Add(std::move(grad));
}

}  // namespace

void RegisterCompareWhereOps(OpRegistry& r) {
  AddCompare<LessThan>(r, "less_than", "X < Y");
  AddCompare<LessEqual>(r, "less_equal", "X <= Y");
  AddCompare<GreaterThan>(r, "greater_than", "X > Y");
  AddCompare<GreaterEqual>(r, "greater_equal", "X >= Y");
  AddCompare<Equal>(r, "equal", "X == Y");
  AddCompare<NotEqual>(r, "not_equal", "X != Y");
  AddWhere(r);
}

}  // namespace kiln
