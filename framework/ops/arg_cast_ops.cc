// arg_max, arg_min (int64 indices of the extreme along an axis) and cast
// (between f32, i64, i32, f64 and bool). The arg ops have no gradient; cast's
// gradient between float dtypes is a cast back.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/ew/ew_fragment.h"
#include "framework/op_registry.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops::IsNan;

// ---- arg_max / arg_min ---------------------------------------------------------------

// X viewed as [outer, n, inner] around the axis searched (flatten: [1, numel, 1]).
struct ArgLayout {
  int64_t outer = 1, n = 1, inner = 1;
};

template <typename Ctx>
ArgLayout MakeArgLayout(const Ctx& ctx, const Dims& x) {
  ArgLayout l;
  if (ctx.template Attr<bool>("flatten")) {
    l.n = Numel(x);
    return l;
  }
  const int64_t axis = NormalizeAxis(ctx.template Attr<int64_t>("axis"), x.size(), ctx.OpName() + ": attribute axis");
  for (int64_t d = 0; d < axis; ++d) l.outer *= x[d];
  l.n = x[axis];
  for (size_t d = axis + 1; d < x.size(); ++d) l.inner *= x[d];
  return l;
}

void InferArg(InferShapeContext& ctx) {
  ops::CheckInputDtype(ctx, "X", {DataType::kFP32, DataType::kFP64, DataType::kINT64, DataType::kINT32});
  const Dims x = ctx.InputDims("X");
  if (x.empty()) ctx.Fail("input X: expected rank >= 1, got ", DimsToString(x));
  const bool flatten = ctx.Attr<bool>("flatten");
  Dims out;
  if (flatten) {
    out = {1};
  } else {
    const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), x.size(), ctx.OpName() + ": attribute axis");
    if (x[axis] == 0) ctx.Fail("input X: dim ", axis, " (attribute axis) has size 0: no index to return");
    for (size_t d = 0; d < x.size(); ++d) {
      if (static_cast<int64_t>(d) != axis) {
        out.push_back(x[d]);
      } else if (ctx.Attr<bool>("keepdims")) {
        out.push_back(1);
      }
    }
    if (out.empty()) out.push_back(1);
  }
  if (flatten && Numel(x) == 0) ctx.Fail("input X: has no elements (", DimsToString(x), "): no index to return");
  ctx.SetOutput("Out", out, DataType::kINT64);
}

// First index of the extreme; a NaN beats every number and the first NaN
// stays (torch's argmax/argmin).
template <typename T>
void ArgKernel(const T* x, const ArgLayout& l, bool max, int64_t* out) {
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t i = 0; i < l.inner; ++i) {
      const T* base = x + o * l.n * l.inner + i;
      int64_t best = 0;
      T value = base[0];
      for (int64_t k = 1; k < l.n && !IsNan(value); ++k) {
        const T v = base[k * l.inner];
        if (IsNan(v) || (max ? v > value : v < value)) {
          best = k;
          value = v;
        }
      }
      out[o * l.inner + i] = best;
    }
  }
}

void ArgOp(ExecContext& ctx, bool max) {
  const Tensor& x = ctx.Input("X");
  const ArgLayout l = MakeArgLayout(ctx, x.dims());
  int64_t* out = ctx.Output("Out")->mutable_data<int64_t>();
  ops::DispatchNumeric(ctx, x.dtype(), "input X", [&](auto tag) {
    using T = decltype(tag);
    ArgKernel(x.data<T>(), l, max, out);
  });
}

// ---- cast ------------------------------------------------------------------------------

// The dtype attribute `name` holds: a proto DataType other than BF16.
template <typename Ctx>
DataType CastDtypeAttr(const Ctx& ctx, const char* name) {
  const int64_t v = ctx.template Attr<int64_t>(name);
  if (v < 0 || v > static_cast<int64_t>(DataType::kBOOL)) {
    ctx.Fail("attribute ", name, ": expected a DataType (FP32 = 0, INT64 = 1, INT32 = 2, FP64 = 3, BOOL = 4), got ",
             v);
  }
  return static_cast<DataType>(v);
}

bool IsFloat(DataType d) { return d == DataType::kFP32 || d == DataType::kFP64; }

void InferCast(InferShapeContext& ctx) {
  const DataType in = CastDtypeAttr(ctx, "in_dtype");
  const DataType out = CastDtypeAttr(ctx, "out_dtype");
  if (ctx.InputDtype("X") != in) {
    ctx.Fail("input X: expected dtype ", DataTypeName(in), " (attribute in_dtype = ", static_cast<int>(in), "), got ",
             DataTypeName(ctx.InputDtype("X")));
  }
  ctx.SetOutput("Out", ctx.InputDims("X"), out);
}

// Float to integer truncates toward zero. C++ leaves NaN and values outside
// To's range undefined; here NaN gives 0 and the rest saturate (Rust's `as`).
template <typename To, typename From>
To TruncateSaturating(From v) {
  using L = std::numeric_limits<To>;
  if (std::isnan(v)) return 0;
  // -2^63 and -2^31 are exact in double, and so is 2^63 = -min.
  const double lo = static_cast<double>(L::min());
  const double d = static_cast<double>(v);
  if (d < lo) return L::min();
  if (d >= -lo) return L::max();
  return static_cast<To>(v);
}

template <typename To, typename From>
To Convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);  // NaN is true, as in numpy and torch
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    return TruncateSaturating<To>(v);
  } else {
    // i64 -> i32 keeps the low 32 bits (two's complement, as numpy); bool
    // gives 0 or 1; to float rounds to nearest (f64 -> f32 overflows to inf).
    return static_cast<To>(v);
  }
}

void CastKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const DataType in = CastDtypeAttr(ctx, "in_dtype");
  if (x.dtype() != in) {
    ctx.Fail("input X: expected dtype ", DataTypeName(in), " (attribute in_dtype), got ", DataTypeName(x.dtype()));
  }
  Tensor* out = ctx.Output("Out");
  const int64_t n = x.numel();
  ops::DispatchAll(ctx, in, "input X", [&](auto from_tag) {
    using From = decltype(from_tag);
    const From* src = x.data<From>();
    ops::DispatchAll(ctx, CastDtypeAttr(ctx, "out_dtype"), "attribute out_dtype", [&](auto to_tag) {
      using To = decltype(to_tag);
      To* dst = out->mutable_data<To>();
      for (int64_t i = 0; i < n; ++i) dst[i] = Convert<To>(src[i]);
    });
  });
}

// Between float dtypes the gradient is Out@GRAD cast back (a `cast` op, as
// Paddle does); no gradient flows into or out of integer and bool dtypes.
std::vector<proto::OpDesc> CastGradMaker(const proto::OpDesc& op) {
  const proto::AttrDesc* in = FindAttr(op, "in_dtype");
  const proto::AttrDesc* out = FindAttr(op, "out_dtype");
  if (in == nullptr || out == nullptr) return {};
  if (!IsFloat(static_cast<DataType>(in->i())) || !IsFloat(static_cast<DataType>(out->i()))) return {};
  return {OpBuilder("cast")
              .In("X", {GradVarName(OutputArgs(op, "Out").at(0))})
              .Out("Out", {GradVarName(InputArgs(op, "X").at(0))})
              .Attr("in_dtype", out->i())
              .Attr("out_dtype", in->i())
              .Build()};
}

// The JIT's form between f32 and bool (either way, or to itself): the
// identity on the value, except that f32 -> bool makes it 0.0/1.0 (ne 0, NaN
// true as in Convert) before a later fragment of the group reads it. None
// for the other dtypes (f64, i64, i32), which generated kernels do not hold.
std::vector<EwFragment> EwCast(const EwOpView& v) {
  const std::string x = v.In("X"), out = v.Out("Out");
  if (x.empty() || out.empty()) return {};
  const DataType from = v.DtypeOf(x), to = v.DtypeOf(out);
  if (!IsEwDtype(from) || !IsEwDtype(to)) return {};
  EwFragment f;
  f.iter = v.DimsOf(x);
  f.reads = {v.Full(x)};
  f.writes = {v.Full(out)};
  const bool to_bool = from == DataType::kFP32 && to == DataType::kBOOL;
  f.emit = [to_bool](EwProgram& p, const std::vector<EwValue>& in) {
    return std::vector<EwValue>{to_bool ? p.Ne(in[0], p.Const(0.0f)) : in[0]};
  };
  return {f};
}

// ---- registration ------------------------------------------------------------------------

void AddArg(OpRegistry& r, const std::string& type, bool max) {
  const std::string what = max ? "maximum" : "minimum";
  OpInfo op;
  op.type = type;
  op.doc = "Out (i64) = the index of the " + what +
           " of X (f32, f64, i64, i32) along attr axis (negative counts from the end), which is dropped, or kept "
           "as 1 with keepdims (nothing left: [1]); flatten: over all elements, Out [1]. Ties give the first index; "
           "a NaN counts as the " +
           what +
           " (the first NaN's index, as torch). Not differentiable (Out is an integer, so append_backward sends no "
           "gradient through it). JIT: framework (its kernel runs inside the cluster, so it does not split one)";
  op.inputs = {ops_a::Required("X")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = {{"axis", AttrKind::kInt, Attribute(int64_t{-1})},
              {"keepdims", AttrKind::kBool, Attribute(false)},
              {"flatten", AttrKind::kBool, Attribute(false)}};
  op.infer_shape = InferArg;
  op.reference_kernel = [max](ExecContext& ctx) { ArgOp(ctx, max); };
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));
}

void AddCast(OpRegistry& r) {
  OpInfo op;
  op.type = "cast";
  op.doc =
      "Out = X converted from in_dtype (which must be X's dtype) to out_dtype, both proto DataType values (FP32 = "
      "0, INT64 = 1, INT32 = 2, FP64 = 3, BOOL = 4), any pair. Float to integer truncates toward zero, NaN gives 0 "
      "and values beyond the integer range saturate; i64 to i32 keeps the low 32 bits; to bool is X != 0 (NaN is "
      "true); bool gives 0 or 1. Gradient between float dtypes: X@GRAD = Out@GRAD cast back (a cast op); none "
      "into or out of integer and bool dtypes. JIT: a generated kernel between f32 and bool (either way, or to "
      "itself); casts from or to f64, i64 and i32 run the framework kernel inside the cluster (the generated "
      "kernels hold f32 and bool only)";
  op.inputs = {ops_a::Required("X")};
  op.outputs = {ops_a::Required("Out")};
  op.attrs = {{"in_dtype", AttrKind::kInt, std::nullopt}, {"out_dtype", AttrKind::kInt, std::nullopt}};
  op.infer_shape = InferCast;
  op.reference_kernel = CastKernel;
  op.grad_maker = CastGradMaker;
  op.jit = JitLowering::kElementwise;
  op.elementwise = EwCast;
  r.Add(std::move(op));
}

}  // namespace

void RegisterArgCastOps(OpRegistry& r) {
  AddArg(r, "arg_max", /*max=*/true);
  AddArg(r, "arg_min", /*max=*/false);
  AddCast(r);
}

}  // namespace kiln
