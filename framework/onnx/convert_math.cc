// Elementwise ONNX ops: arithmetic, Max/Min/Mod, comparisons and logical
// ops, Where, Sum/Mean, activations, Clip and Cast, each onto the kiln op
// that computes it.
#include <cmath>
#include <limits>

#include "framework/onnx/convert_util.h"
#include "framework/onnx/converter_table.h"
#include "framework/onnx/onnx_tensor.h"

namespace kiln::onnx_import {
namespace {

void Binary(NodeContext& ctx, const char* kiln_op, Operands order, const char* flipped = nullptr) {
  const BinaryOperands o = MapBroadcast(ctx, order);
  const char* type = o.swapped && flipped != nullptr ? flipped : kiln_op;
  ctx.Op1(type, {{"X", {o.x}}, {"Y", {o.y}}}, {}, ctx.Out(0));
}

void ConvertAdd(NodeContext& ctx) { Binary(ctx, "elementwise_add", Operands::kCommutative); }
void ConvertMul(NodeContext& ctx) { Binary(ctx, "elementwise_mul", Operands::kCommutative); }
void ConvertDiv(NodeContext& ctx) { Binary(ctx, "elementwise_div", Operands::kOrdered); }

// a - b where a broadcasts into b's shape: -(b - a), which IEEE arithmetic
// makes the same number (rounding is symmetric in sign).
void ConvertSub(NodeContext& ctx) {
  const BinaryOperands o = MapBroadcast(ctx, Operands::kCommutative);
  if (!o.swapped) {
    ctx.Op1("elementwise_sub", {{"X", {o.x}}, {"Y", {o.y}}}, {}, ctx.Out(0));
    return;
  }
  const std::string d = ctx.Op1("elementwise_sub", {{"X", {o.x}}, {"Y", {o.y}}});
  ctx.Op1("scale", {{"X", {d}}}, {{"scale", -1.0f}}, ctx.Out(0));
}

void ConvertEqual(NodeContext& ctx) { Binary(ctx, "equal", Operands::kCommutative); }
void ConvertLess(NodeContext& ctx) { Binary(ctx, "less_than", Operands::kFlippable, "greater_than"); }
void ConvertGreater(NodeContext& ctx) { Binary(ctx, "greater_than", Operands::kFlippable, "less_than"); }
void ConvertLessOrEqual(NodeContext& ctx) { Binary(ctx, "less_equal", Operands::kFlippable, "greater_equal"); }
void ConvertGreaterOrEqual(NodeContext& ctx) { Binary(ctx, "greater_equal", Operands::kFlippable, "less_equal"); }

// x ^ y: pow's factor for a float x and a y known at import that is one
// value (its integer factors are exact powers), else elementwise_pow (both
// operands of one dtype, as kiln's binary ops take them).
void ConvertPow(NodeContext& ctx) {
  const Tensor* e = ctx.Constant(1);
  const DataType x = ctx.InputDtype(0);
  if (e != nullptr && e->numel() == 1 && (x == DataType::kFP32 || x == DataType::kFP64)) {
    const double y = ctx.ConstantScalar(1, "the exponent");
    const float f = static_cast<float>(y);
    if (static_cast<double>(f) != y && std::isfinite(y)) {
      ctx.Refuse("the exponent ", y, " is not a float value (pow's factor is one)");
    }
    ctx.Op1("pow", {{"X", {ctx.Input(0)}}}, {{"factor", f}}, ctx.Out(0));
    return;
  }
  if (ctx.InputDtype(1) != x) {
    ctx.Refuse("the base is ", DataTypeName(x), ", the exponent ", DataTypeName(ctx.InputDtype(1)),
               "; kiln's elementwise_pow takes one dtype for both");
  }
  Binary(ctx, "elementwise_pow", Operands::kOrdered);
}

// Max/Min of any number of inputs (numpy broadcasting among all of them):
// the binary op chained from the left; max and min are associative and
// commutative, NaN included (a NaN anywhere gives NaN).
void Variadic(NodeContext& ctx, const char* kiln_op) {
  std::string acc = ctx.Input(0);
  Dims dims = ctx.InputDims(0);
  for (size_t i = 1; i < ctx.InputCount(); ++i) {
    if (ctx.InputDtype(i) != ctx.InputDtype(0)) {
      ctx.Refuse("input ", i, " is ", DataTypeName(ctx.InputDtype(i)), ", input 0 ", DataTypeName(ctx.InputDtype(0)));
    }
    const BinaryOperands o = MapBroadcast(ctx, Operands::kCommutative, acc, dims, ctx.Input(i), ctx.InputDims(i));
    const bool last = i + 1 == ctx.InputCount();
    acc = ctx.Op1(kiln_op, {{"X", {o.x}}, {"Y", {o.y}}}, {}, last ? ctx.Out(0) : "");
    dims = ctx.VarDims(acc);
  }
  if (ctx.InputCount() == 1) ctx.Alias(0, acc);
}

void ConvertMax(NodeContext& ctx) { Variadic(ctx, "elementwise_max"); }
void ConvertMin(NodeContext& ctx) { Variadic(ctx, "elementwise_min"); }

// fmod 0: the remainder with the divisor's sign (Python's %), which ONNX
// allows for integers only; fmod 1: C's fmod, the dividend's sign.
void ConvertMod(NodeContext& ctx) {
  const bool fmod = ctx.Int("fmod", 0) != 0;
  const DataType d = ctx.InputDtype(0);
  if (!fmod && (d == DataType::kFP32 || d == DataType::kFP64)) {
    ctx.Refuse("fmod = 0 with ", DataTypeName(d), " operands: ONNX requires fmod = 1 for floats");
  }
  const BinaryOperands o = MapBroadcast(ctx, Operands::kOrdered);
  ctx.Op1("elementwise_mod", {{"X", {o.x}}, {"Y", {o.y}}}, {{"fmod", fmod}}, ctx.Out(0));
}

void ConvertAnd(NodeContext& ctx) { Binary(ctx, "logical_and", Operands::kCommutative); }
void ConvertOr(NodeContext& ctx) { Binary(ctx, "logical_or", Operands::kCommutative); }
void ConvertXor(NodeContext& ctx) { Binary(ctx, "logical_xor", Operands::kCommutative); }

// numpy's broadcasting among the three: each input that lacks the common
// shape is expanded to it (kiln's where takes one shape for all three).
void ConvertWhere(NodeContext& ctx) {
  const Dims r = BroadcastShapes(ctx, BroadcastShapes(ctx, ctx.InputDims(0), ctx.InputDims(1)), ctx.InputDims(2));
  std::vector<std::string> in;
  for (size_t i = 0; i < 3; ++i) in.push_back(BroadcastTo(ctx, ctx.Input(i), ctx.InputDims(i), r));
  ctx.Op1("where", {{"Condition", {in[0]}}, {"X", {in[1]}}, {"Y", {in[2]}}}, {}, ctx.Out(0));
}

// The inputs of Sum/Mean, which kiln's sum adds without broadcasting.
std::vector<std::string> SameShapeInputs(NodeContext& ctx) {
  std::vector<std::string> xs;
  for (size_t i = 0; i < ctx.InputCount(); ++i) {
    if (ctx.InputDims(i) != ctx.InputDims(0)) {
      ctx.Refuse("broadcast: input ", i, " is ", DimsToString(ctx.InputDims(i)), ", input 0 ",
                 DimsToString(ctx.InputDims(0)), "; kiln's sum adds tensors of one shape");
    }
    xs.push_back(ctx.Input(i));
  }
  return xs;
}

void ConvertSum(NodeContext& ctx) {
  const std::vector<std::string> xs = SameShapeInputs(ctx);
  if (xs.size() == 1) {
    ctx.Alias(0, xs[0]);
    return;
  }
  ctx.Op1("sum", {{"X", xs}}, {}, ctx.Out(0));
}

// Mean = Sum / n, as ONNX defines it.
void ConvertMean(NodeContext& ctx) {
  if (ctx.InputDtype(0) != DataType::kFP32) ctx.Refuse("input dtype ", DataTypeName(ctx.InputDtype(0)), ": float only");
  const std::vector<std::string> xs = SameShapeInputs(ctx);
  const std::string s = xs.size() == 1 ? xs[0] : ctx.Op1("sum", {{"X", xs}});
  Tensor n(DataType::kFP32, {1});
  n.mutable_data<float>()[0] = static_cast<float>(xs.size());
  ctx.Op1("elementwise_div", {{"X", {s}}, {"Y", {ctx.ConstantVar("count", n)}}}, {}, ctx.Out(0));
}

void Unary(NodeContext& ctx, const char* kiln_op, const AttrMap& attrs = {}) {
  ctx.Op1(kiln_op, {{"X", {ctx.Input(0)}}}, attrs, ctx.Out(0));
}

void ConvertRelu(NodeContext& ctx) { Unary(ctx, "relu"); }
void ConvertTanh(NodeContext& ctx) { Unary(ctx, "tanh"); }
void ConvertSigmoid(NodeContext& ctx) { Unary(ctx, "sigmoid"); }
void ConvertExp(NodeContext& ctx) { Unary(ctx, "exp"); }
void ConvertLog(NodeContext& ctx) { Unary(ctx, "log"); }
void ConvertSqrt(NodeContext& ctx) { Unary(ctx, "sqrt"); }
void ConvertAbs(NodeContext& ctx) { Unary(ctx, "abs"); }
void ConvertNeg(NodeContext& ctx) { Unary(ctx, "scale", {{"scale", -1.0f}}); }
// pow's integer factors are exact: x^-1 is one division, 1/x.
void ConvertReciprocal(NodeContext& ctx) { Unary(ctx, "pow", {{"factor", -1.0f}}); }
void ConvertNot(NodeContext& ctx) { Unary(ctx, "logical_not"); }
void ConvertLeakyRelu(NodeContext& ctx) { Unary(ctx, "leaky_relu", {{"alpha", ctx.Float("alpha", 0.01f)}}); }
// softplus's threshold 20 changes nothing in f32: log1p(exp(-20)) is below
// half an ulp of 20.
void ConvertSoftplus(NodeContext& ctx) { Unary(ctx, "softplus"); }

// Opset 6-10: min/max attributes; 11+: optional scalar inputs known at import.
void ConvertClip(NodeContext& ctx) {
  const float inf = std::numeric_limits<float>::infinity();
  float lo = -inf, hi = inf;
  if (ctx.opset() < 11) {
    lo = ctx.Float("min", std::numeric_limits<float>::lowest());
    hi = ctx.Float("max", std::numeric_limits<float>::max());
  } else {
    if (ctx.HasInput(1)) lo = static_cast<float>(ctx.ConstantScalar(1, "min"));
    if (ctx.HasInput(2)) hi = static_cast<float>(ctx.ConstantScalar(2, "max"));
  }
  if (lo > hi) ctx.Refuse("min ", lo, " > max ", hi, " (ONNX gives max everywhere; kiln's clip refuses it)");
  Unary(ctx, "clip", {{"min", lo}, {"max", hi}});
}

void CastTo(NodeContext& ctx, DataType to) {
  const DataType from = ctx.InputDtype(0);
  if (from == to) {
    ctx.Alias(0, ctx.Input(0));
    return;
  }
  Unary(ctx, "cast",
        {{"in_dtype", static_cast<int64_t>(ToProto(from))}, {"out_dtype", static_cast<int64_t>(ToProto(to))}});
}

void ConvertCast(NodeContext& ctx) {
  const int64_t to = ctx.Int("to", 0);
  const std::optional<DataType> d = KilnDtype(static_cast<int32_t>(to));
  if (!d) ctx.Refuse("attribute to = ", OnnxDtypeName(static_cast<int32_t>(to)), ": kiln has no such dtype");
  CastTo(ctx, *d);
}

void ConvertCastLike(NodeContext& ctx) { CastTo(ctx, ctx.InputDtype(1)); }

}  // namespace

void AddMathConverters(std::vector<Converter>* t) {
  // Opset 7 replaced the legacy broadcast/axis attributes by numpy broadcasting.
  t->push_back(MakeConverter("Add", 7, ConvertAdd));
  t->push_back(MakeConverter("Sub", 7, ConvertSub));
  t->push_back(MakeConverter("Mul", 7, ConvertMul));
  t->push_back(MakeConverter("Div", 7, ConvertDiv));
  t->push_back(MakeConverter("Pow", 7, ConvertPow));
  // Opset 8 added broadcasting among the inputs; 6's have one shape, which
  // the chain computes the same.
  t->push_back(MakeConverter("Max", 6, ConvertMax));
  t->push_back(MakeConverter("Min", 6, ConvertMin));
  t->push_back(MakeConverter("Mod", 10, ConvertMod));
  t->push_back(MakeConverter("And", 7, ConvertAnd));
  t->push_back(MakeConverter("Or", 7, ConvertOr));
  t->push_back(MakeConverter("Xor", 7, ConvertXor));
  t->push_back(MakeConverter("Not", 1, ConvertNot));
  t->push_back(MakeConverter("Equal", 7, ConvertEqual));
  t->push_back(MakeConverter("Less", 7, ConvertLess));
  t->push_back(MakeConverter("Greater", 7, ConvertGreater));
  t->push_back(MakeConverter("LessOrEqual", 12, ConvertLessOrEqual));
  t->push_back(MakeConverter("GreaterOrEqual", 12, ConvertGreaterOrEqual));
  t->push_back(MakeConverter("Where", 9, ConvertWhere));
  t->push_back(MakeConverter("Sum", 6, ConvertSum));
  t->push_back(MakeConverter("Mean", 6, ConvertMean));
  t->push_back(MakeConverter("Relu", 6, ConvertRelu));
  t->push_back(MakeConverter("Tanh", 6, ConvertTanh));
  t->push_back(MakeConverter("Sigmoid", 6, ConvertSigmoid));
  t->push_back(MakeConverter("Exp", 6, ConvertExp));
  t->push_back(MakeConverter("Log", 6, ConvertLog));
  t->push_back(MakeConverter("Sqrt", 6, ConvertSqrt));
  t->push_back(MakeConverter("Abs", 6, ConvertAbs));
  t->push_back(MakeConverter("Neg", 6, ConvertNeg));
  t->push_back(MakeConverter("Reciprocal", 6, ConvertReciprocal));
  t->push_back(MakeConverter("LeakyRelu", 6, ConvertLeakyRelu));
  t->push_back(MakeConverter("Softplus", 1, ConvertSoftplus));
  t->push_back(MakeConverter("Clip", 6, ConvertClip));
  t->push_back(MakeConverter("Cast", 6, ConvertCast));
  t->push_back(MakeConverter("CastLike", 15, ConvertCastLike));
}

}  // namespace kiln::onnx_import
