// fill_constant and uniform_random: ops without inputs that create a tensor
// from attrs (gradient seeds, parameter initialisation); fill_any_like, a
// constant of another var's run-time dims (the seed of a target whose dims
// are known only at run time).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// Attr `shape`, checked: every dim positive.
Dims ShapeAttr(const InferShapeContext& ctx) {
  const auto& shape = ctx.Attr<std::vector<int64_t>>("shape");
  for (int64_t d : shape) {
    if (d <= 0) ctx.Fail("attribute shape: expected positive dims, got ", DimsToString(shape));
  }
  return shape;
}

// Attr `dtype` holds a proto::DataType value; `allowed` lists the ones the op supports.
DataType DtypeAttr(const InferShapeContext& ctx, const std::vector<DataType>& allowed) {
  const int64_t v = ctx.Attr<int64_t>("dtype");
  for (DataType d : allowed) {
    if (static_cast<int64_t>(d) == v) return d;
  }
  std::string names;
  for (DataType d : allowed) {
    names += (names.empty() ? "" : ", ") + std::to_string(static_cast<int>(d)) + " (" + DataTypeName(d) + ")";
  }
  ctx.Fail("attribute dtype: expected one of ", names, ", got ", v);
}

const std::vector<DataType>& FillDtypes() {
  static const std::vector<DataType> d = {DataType::kFP32, DataType::kINT64, DataType::kINT32, DataType::kFP64};
  return d;
}
const std::vector<DataType>& RandomDtypes() {
  static const std::vector<DataType> d = {DataType::kFP32, DataType::kFP64};
  return d;
}

// Attr str_value (Paddle's), when not empty: the value at full precision,
// an integer literal for integer dtypes (a float attr holds only 24 bits:
// 16777217 or 0.1 in f64 would change). nullopt when empty.
struct ExactValue {
  double f = 0;
  int64_t i = 0;
};
template <typename Ctx>
std::optional<ExactValue> StrValue(const Ctx& ctx, DataType dtype) {
  const std::string& s = ctx.template Attr<std::string>("str_value");
  if (s.empty()) return std::nullopt;
  ExactValue v;
  size_t used = 0;
  try {
    if (dtype == DataType::kINT64 || dtype == DataType::kINT32) {
      v.i = std::stoll(s, &used);
      v.f = static_cast<double>(v.i);
    } else {
      v.f = std::stod(s, &used);
    }
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || (dtype == DataType::kINT32 && (v.i < INT32_MIN || v.i > INT32_MAX))) {
    ctx.Fail("attribute str_value: '", s, "' is not a ", DataTypeName(dtype), " value");
  }
  return v;
}

void InferFillConstant(InferShapeContext& ctx) {
  const DataType dtype = DtypeAttr(ctx, FillDtypes());
  StrValue(ctx, dtype);  // checked here, before anything runs
  ctx.SetOutput("Out", ShapeAttr(ctx), dtype);
}

template <typename T>
void Fill(Tensor* out, T value) {
  T* p = out->mutable_data<T>();
  std::fill(p, p + out->numel(), value);
}

// InferShape has set Out's dims and dtype.
void FillWith(ExecContext& ctx, Tensor* out, float value, const std::optional<ExactValue>& exact) {
  switch (out->dtype()) {
    case DataType::kFP32:
      Fill<float>(out, exact ? static_cast<float>(exact->f) : value);
      break;
    case DataType::kFP64:
      Fill<double>(out, exact ? exact->f : value);
      break;
    case DataType::kINT64:
      Fill<int64_t>(out, exact ? exact->i : static_cast<int64_t>(value));
      break;
    case DataType::kINT32:
      Fill<int32_t>(out, exact ? static_cast<int32_t>(exact->i) : static_cast<int32_t>(value));
      break;
    default:
      ctx.Fail("output Out: unsupported dtype ", DataTypeName(out->dtype()));
  }
}

void FillConstantKernel(ExecContext& ctx) {
  Tensor* out = ctx.Output("Out");
  FillWith(ctx, out, ctx.Attr<float>("value"), StrValue(ctx, out->dtype()));
}

void FillAnyLikeKernel(ExecContext& ctx) {
  Tensor* out = ctx.Output("Out");
  FillWith(ctx, out, ctx.Attr<float>("value"), std::nullopt);
}

// dtype -1: X's.
DataType LikeDtype(const InferShapeContext& ctx) {
  if (ctx.Attr<int64_t>("dtype") == -1) return ctx.InputDtype("X");
  return DtypeAttr(ctx, FillDtypes());
}

void InferFillAnyLike(InferShapeContext& ctx) { ctx.SetOutput("Out", ctx.InputDims("X"), LikeDtype(ctx)); }

void InferUniformRandom(InferShapeContext& ctx) {
  const float lo = ctx.Attr<float>("min");
  const float hi = ctx.Attr<float>("max");
  if (!(lo <= hi)) ctx.Fail("attributes min/max: expected min <= max, got ", lo, " > ", hi);
  ctx.SetOutput("Out", ShapeAttr(ctx), DtypeAttr(ctx, RandomDtypes()));
}

// Values are min + (max - min) * u with u in [0, 1) built from std::mt19937
// words by a fixed recipe (std::uniform_real_distribution is
// implementation-defined), so a seed gives the same tensor on every platform:
// FP32 takes the top 24 bits of one word, FP64 53 bits from two words.
void UniformRandomKernel(ExecContext& ctx) {
  Tensor* out = ctx.Output("Out");
  const double lo = ctx.Attr<float>("min");
  const double hi = ctx.Attr<float>("max");
  std::mt19937 rng(static_cast<std::mt19937::result_type>(ctx.Attr<int64_t>("seed")));
  const int64_t n = out->numel();
  if (out->dtype() == DataType::kFP64) {
    double* p = out->mutable_data<double>();
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t a = rng() >> 5;                                                     // 27 bits
      const uint64_t b = rng() >> 6;                                                     // 26 bits
      const double u = static_cast<double>((a << 26) | b) * (1.0 / 9007199254740992.0);  // 2^-53
      p[i] = lo + (hi - lo) * u;
    }
    return;
  }
  if (out->dtype() != DataType::kFP32) ctx.Fail("output Out: unsupported dtype ", DataTypeName(out->dtype()));
  float* p = out->mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(rng() >> 8) * (1.0 / 16777216.0);  // 2^-24
    // Rounding to float may reach max exactly; keep the interval half-open.
    float v = static_cast<float>(lo + (hi - lo) * u);
    if (v >= static_cast<float>(hi) && hi > lo) v = std::nextafter(static_cast<float>(hi), static_cast<float>(lo));
    p[i] = v;
  }
}

}  // namespace

void RegisterFillOps(OpRegistry& r) {
  {
    OpInfo op;
    op.type = "fill_constant";
    op.doc = "Out = a tensor of attr shape and dtype filled with value, or with str_value when it is not empty (the "
             "value at full precision: an integer literal for INT64/INT32, a decimal for FP32/FP64)";
    op.outputs = {ops_a::Required("Out")};
    op.attrs = {{"shape", AttrKind::kInts, std::nullopt},
                {"value", AttrKind::kFloat, Attribute(0.0f)},
                {"dtype", AttrKind::kInt, Attribute(int64_t{0})},
                {"str_value", AttrKind::kString, Attribute(std::string())}};
    op.infer_shape = InferFillConstant;
    op.reference_kernel = FillConstantKernel;
    op.jit = JitLowering::kFramework;
    r.Add(std::move(op));
  }
  {
    OpInfo op;
    op.type = "fill_any_like";
    op.doc = "Out = a tensor of X's dims filled with value; dtype -1 is X's dtype (X is read for its dims only)";
    op.inputs = {ops_a::Required("X")};
    op.outputs = {ops_a::Required("Out")};
    op.attrs = {{"value", AttrKind::kFloat, Attribute(0.0f)}, {"dtype", AttrKind::kInt, Attribute(int64_t{-1})}};
    op.infer_shape = InferFillAnyLike;
    op.reference_kernel = FillAnyLikeKernel;
    op.no_need_buffer = {"X"};
    // Out does not depend on X's values: no gradient flows back through X.
    // Without this, append_backward refused any target whose path crosses a
    // fill_any_like (such as a first pass's seed) as "has no gradient".
    op.no_grad_inputs = {"X"};
    op.jit = JitLowering::kFramework;
    r.Add(std::move(op));
  }
  {
    OpInfo op;
    op.type = "uniform_random";
    op.doc = "Out = values uniform in [min, max), reproducible for a given seed";
    op.outputs = {ops_a::Required("Out")};
    op.attrs = {{"shape", AttrKind::kInts, std::nullopt},
                {"min", AttrKind::kFloat, Attribute(-1.0f)},
                {"max", AttrKind::kFloat, Attribute(1.0f)},
                {"seed", AttrKind::kInt, Attribute(int64_t{0})},
                {"dtype", AttrKind::kInt, Attribute(int64_t{0})}};
    op.infer_shape = InferUniformRandom;
    op.reference_kernel = UniformRandomKernel;
    r.Add(std::move(op));
  }
}

}  // namespace kiln
