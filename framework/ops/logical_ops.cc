// The bool-valued elementwise ops: logical_and, logical_or, logical_xor (Y
// broadcast into X as the elementwise ops do), logical_not, isnan and isinf.
// None is differentiable (bool outputs carry no gradient). In generated
// kernels a bool is 0.0 or 1.0 in a float lane, so each is a comparison or
// an arithmetic identity on those values.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
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

// ---- logical_and / or / xor / not ----------------------------------------------------------
struct And {
  static bool Apply(bool x, bool y) { return x && y; }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Mul(x, y); }
};
struct Or {
  static bool Apply(bool x, bool y) { return x || y; }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Gt(p.Add(x, y), p.Const(0.0f)); }
};
struct Xor {
  static bool Apply(bool x, bool y) { return x != y; }
  static EwValue Ew(EwProgram& p, EwValue x, EwValue y) { return p.Ne(x, y); }
};

void InferLogical(InferShapeContext& ctx) {
  ops::CheckInputDtype(ctx, "X", {DataType::kBOOL});
  ops::CheckInputDtype(ctx, "Y", {DataType::kBOOL});
  const Dims x = ctx.InputDims("X");
  BroadcastYDims(x, ctx.InputDims("Y"), ctx.Attr<int64_t>("axis"), ctx.OpName());
  ctx.SetOutput("Out", x, DataType::kBOOL);
}

template <typename Fn>
void LogicalKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Dims ypad = BroadcastYDims(x.dims(), y.dims(), ctx.Attr<int64_t>("axis"), ctx.OpName());
  const bool* xp = x.data<bool>();
  const bool* yp = y.data<bool>();
  bool* o = ctx.Output("Out")->mutable_data<bool>();
  ForEachBroadcast(MakeBroadcastLoops(x.dims(), ypad), [&](int64_t i, int64_t j) { o[i] = Fn::Apply(xp[i], yp[j]); });
}

template <typename Fn>
std::vector<EwFragment> EwLogical(const EwOpView& v) {
  const std::string x = v.In("X"), y = v.In("Y"), out = v.Out("Out");
  if (x.empty() || y.empty() || out.empty()) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(x), {y, BroadcastYDims(f.iter, v.DimsOf(y), v.Attr<int64_t>("axis"), v.op().type())}};
  f.writes = {v.Full(out)};
  f.emit = [](EwProgram& p, const std::vector<EwValue>& in) { return std::vector<EwValue>{Fn::Ew(p, in[0], in[1])}; };
  return {f};
}

template <typename Fn>
void AddLogical(OpRegistry& r, const std::string& type, const std::string& meaning) {
  OpInfo op;
  op.type = type;
  op.doc = "Out (bool) = " + meaning +
           " elementwise for bool X and Y, Y broadcast into X from axis as in the elementwise ops. Not "
           "differentiable";
  op.inputs = {ops_a::Required("X"), ops_a::Required("Y")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = {{"axis", AttrKind::kInt, Attribute(int64_t{-1})}};
  op.infer_shape = InferLogical;
  op.reference_kernel = LogicalKernel<Fn>;
  op.inplace = {{"X", "Out"}};
  op.jit = JitLowering::kElementwise;
  op.elementwise = EwLogical<Fn>;
  r.Add(std::move(op));
}

// One input X of the allowed dtypes, a bool Out of its dims, Out[i] =
// pred(X[i]). `ew` reads the op's attrs and gives the predicate as an
// emitter of 0.0/1.0 (generated for f32 and bool X).
using EwPredicate = std::function<EwValue(EwProgram&, EwValue)>;
struct UnaryPredicate {
  std::string type, doc;
  std::vector<DataType> dtypes;
  std::vector<AttrDef> attrs;
  KernelFn kernel;
  std::function<EwPredicate(const EwOpView&)> ew;
};

void AddUnaryPredicate(OpRegistry& r, UnaryPredicate u) {
  OpInfo op;
  op.type = u.type;
  op.doc = u.doc + ". Not differentiable";
  op.inputs = {ops_a::Required("X")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = u.attrs;
  op.infer_shape = [dtypes = u.dtypes](InferShapeContext& ctx) {
    const DataType d = ctx.InputDtype("X");
    if (std::find(dtypes.begin(), dtypes.end(), d) == dtypes.end()) {
      std::string list;
      for (size_t k = 0; k < dtypes.size(); ++k) list += std::string(k ? " or " : "") + DataTypeName(dtypes[k]);
      ctx.Fail("input X: expected dtype ", list, ", got ", DataTypeName(d));
    }
    ctx.SetOutput("Out", ctx.InputDims("X"), DataType::kBOOL);
  };
  op.reference_kernel = std::move(u.kernel);
  op.jit = JitLowering::kElementwise;
  op.elementwise = [ew = std::move(u.ew)](const EwOpView& v) -> std::vector<EwFragment> {
    const std::string x = v.In("X"), out = v.Out("Out");
    if (x.empty() || out.empty() || !IsEwDtype(v.DtypeOf(x))) return {};
    EwFragment f;
    f.iter = v.DimsOf(x);
    f.reads = {v.Full(x)};
    f.writes = {v.Full(out)};
    f.emit = [pred = ew(v)](EwProgram& p, const std::vector<EwValue>& in) {
      return std::vector<EwValue>{pred(p, in[0])};
    };
    return {f};
  };
  r.Add(std::move(op));
}

void LogicalNotKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const bool* xp = x.data<bool>();
  bool* o = ctx.Output("Out")->mutable_data<bool>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = !xp[i];
}

// ---- isnan / isinf ------------------------------------------------------------------------
template <typename Pred>
void FloatPredicateKernel(ExecContext& ctx, Pred pred) {
  const Tensor& x = ctx.Input("X");
  bool* o = ctx.Output("Out")->mutable_data<bool>();
  ops_a::DispatchFloat(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = pred(xp[i]);
  });
}

}  // namespace

void RegisterLogicalOps(OpRegistry& r) {
  AddLogical<And>(r, "logical_and", "X and Y");
  AddLogical<Or>(r, "logical_or", "X or Y");
  AddLogical<Xor>(r, "logical_xor", "X xor Y (X != Y)");
  const std::vector<DataType> floats = {DataType::kFP32, DataType::kFP64};
  AddUnaryPredicate(r, {"logical_not", "Out (bool) = not X, for bool X", {DataType::kBOOL}, {}, LogicalNotKernel,
                        [](const EwOpView&) -> EwPredicate {
                          return [](EwProgram& p, EwValue x) { return p.Eq(x, p.Const(0.0f)); };
                        }});
  AddUnaryPredicate(r, {"isnan", "Out (bool) = X is NaN, for f32 and f64 X. JIT: X != X, generated for f32", floats, {},
                        [](ExecContext& ctx) { FloatPredicateKernel(ctx, [](auto v) { return std::isnan(v); }); },
                        [](const EwOpView&) -> EwPredicate {
                          return [](EwProgram& p, EwValue x) { return p.Ne(x, x); };
                        }});
  AddUnaryPredicate(
      r,
      {"isinf",
       "Out (bool) = X is +inf (when detect_positive) or -inf (when detect_negative), for f32 and f64 X (ONNX IsInf). "
       "JIT: comparisons with the infinities, generated for f32",
       floats,
       {{"detect_positive", AttrKind::kBool, Attribute(true)}, {"detect_negative", AttrKind::kBool, Attribute(true)}},
       [](ExecContext& ctx) {
         const bool pos = ctx.Attr<bool>("detect_positive"), neg = ctx.Attr<bool>("detect_negative");
         FloatPredicateKernel(ctx, [pos, neg](auto v) { return std::isinf(v) && (v > 0 ? pos : neg); });
       },
       [](const EwOpView& v) -> EwPredicate {
         const bool pos = v.Attr<bool>("detect_positive"), neg = v.Attr<bool>("detect_negative");
         return [pos, neg](EwProgram& p, EwValue x) {
           const float inf = std::numeric_limits<float>::infinity();
           if (pos && neg) return p.Eq(p.Abs(x), p.Const(inf));
           if (pos) return p.Eq(x, p.Const(inf));
           if (neg) return p.Eq(x, p.Const(-inf));
           return p.Const(0.0f);
         };
       }});
}

}  // namespace kiln
