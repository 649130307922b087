// Elementwise ONNX ops of one operand added for issue 28: rounding, Erf,
// Sign, the trigonometric and hyperbolic functions, IsNaN/IsInf and the
// activations (Elu, Selu, Celu, HardSigmoid, HardSwish, ThresholdedRelu,
// Softsign, PRelu), each onto the kiln op of the same definition with ONNX's
// attributes renamed (docs/ops.md).
#include "framework/onnx/convert_util.h"
#include "framework/onnx/converter_table.h"

namespace kiln::onnx_import {
namespace {

void Unary(NodeContext& ctx, const char* kiln_op, const AttrMap& attrs = {}) {
  ctx.Op1(kiln_op, {{"X", {ctx.Input(0)}}}, attrs, ctx.Out(0));
}

void ConvertErf(NodeContext& ctx) { Unary(ctx, "erf"); }
void ConvertFloor(NodeContext& ctx) { Unary(ctx, "floor"); }
void ConvertCeil(NodeContext& ctx) { Unary(ctx, "ceil"); }
// Halves to even, as ONNX Round.
void ConvertRound(NodeContext& ctx) { Unary(ctx, "round"); }
void ConvertSign(NodeContext& ctx) { Unary(ctx, "sign"); }
void ConvertSin(NodeContext& ctx) { Unary(ctx, "sin"); }
void ConvertCos(NodeContext& ctx) { Unary(ctx, "cos"); }
void ConvertTan(NodeContext& ctx) { Unary(ctx, "tan"); }
void ConvertAsin(NodeContext& ctx) { Unary(ctx, "asin"); }
void ConvertAcos(NodeContext& ctx) { Unary(ctx, "acos"); }
void ConvertAtan(NodeContext& ctx) { Unary(ctx, "atan"); }
void ConvertSinh(NodeContext& ctx) { Unary(ctx, "sinh"); }
void ConvertCosh(NodeContext& ctx) { Unary(ctx, "cosh"); }
void ConvertAsinh(NodeContext& ctx) { Unary(ctx, "asinh"); }
void ConvertAcosh(NodeContext& ctx) { Unary(ctx, "acosh"); }
void ConvertAtanh(NodeContext& ctx) { Unary(ctx, "atanh"); }
void ConvertIsNaN(NodeContext& ctx) { Unary(ctx, "isnan"); }
void ConvertIsInf(NodeContext& ctx) {
  Unary(ctx, "isinf",
        {{"detect_positive", ctx.Int("detect_positive", 1) != 0}, {"detect_negative", ctx.Int("detect_negative", 1) != 0}});
}

void ConvertSoftsign(NodeContext& ctx) { Unary(ctx, "softsign"); }
void ConvertElu(NodeContext& ctx) { Unary(ctx, "elu", {{"alpha", ctx.Float("alpha", 1.0f)}}); }
void ConvertCelu(NodeContext& ctx) {
  const float alpha = ctx.Float("alpha", 1.0f);
  if (alpha == 0) ctx.Refuse("alpha 0: Celu divides by it");
  Unary(ctx, "celu", {{"alpha", alpha}});
}
// ONNX's defaults are the f32 roundings of selu's constants (as kiln's).
void ConvertSelu(NodeContext& ctx) {
  Unary(ctx, "selu",
        {{"alpha", ctx.Float("alpha", 1.67326319217681884765625f)},
         {"scale", ctx.Float("gamma", 1.05070102214813232421875f)}});
}
void ConvertHardSigmoid(NodeContext& ctx) {
  Unary(ctx, "hard_sigmoid", {{"slope", ctx.Float("alpha", 0.2f)}, {"offset", ctx.Float("beta", 0.5f)}});
}
// X * max(0, min(1, X/6 + 1/2)) = X * clamp(X + 3, 0, 6) / 6: hard_swish's defaults.
void ConvertHardSwish(NodeContext& ctx) {
  Unary(ctx, "hard_swish", {{"threshold", 6.0f}, {"scale", 6.0f}, {"offset", 3.0f}});
}
void ConvertThresholdedRelu(NodeContext& ctx) {
  Unary(ctx, "thresholded_relu", {{"threshold", ctx.Float("alpha", 1.0f)}});
}

// The slope broadcasts into X numpy's way (opset 7+): prelu's "element" mode.
void ConvertPRelu(NodeContext& ctx) {
  ctx.Op1("prelu", {{"X", {ctx.Input(0)}}, {"Alpha", {ctx.Input(1)}}}, {{"mode", std::string("element")}},
          ctx.Out(0));
}

}  // namespace

void AddUnaryConverters(std::vector<Converter>* t) {
  t->push_back(MakeConverter("Erf", 9, ConvertErf));
  t->push_back(MakeConverter("Floor", 6, ConvertFloor));
  t->push_back(MakeConverter("Ceil", 6, ConvertCeil));
  t->push_back(MakeConverter("Round", 11, ConvertRound));
  t->push_back(MakeConverter("Sign", 9, ConvertSign));
  t->push_back(MakeConverter("Sin", 7, ConvertSin));
  t->push_back(MakeConverter("Cos", 7, ConvertCos));
  t->push_back(MakeConverter("Tan", 7, ConvertTan));
  t->push_back(MakeConverter("Asin", 7, ConvertAsin));
  t->push_back(MakeConverter("Acos", 7, ConvertAcos));
  t->push_back(MakeConverter("Atan", 7, ConvertAtan));
  t->push_back(MakeConverter("Sinh", 9, ConvertSinh));
  t->push_back(MakeConverter("Cosh", 9, ConvertCosh));
  t->push_back(MakeConverter("Asinh", 9, ConvertAsinh));
  t->push_back(MakeConverter("Acosh", 9, ConvertAcosh));
  t->push_back(MakeConverter("Atanh", 9, ConvertAtanh));
  t->push_back(MakeConverter("IsNaN", 9, ConvertIsNaN));
  t->push_back(MakeConverter("IsInf", 10, ConvertIsInf));
  t->push_back(MakeConverter("Softsign", 1, ConvertSoftsign));
  // Elu, Selu, HardSigmoid and PRelu before opset 6 had consumed_inputs.
  t->push_back(MakeConverter("Elu", 6, ConvertElu));
  t->push_back(MakeConverter("Selu", 6, ConvertSelu));
  t->push_back(MakeConverter("Celu", 12, ConvertCelu));
  t->push_back(MakeConverter("HardSigmoid", 6, ConvertHardSigmoid));
  t->push_back(MakeConverter("HardSwish", 14, ConvertHardSwish));
  t->push_back(MakeConverter("ThresholdedRelu", 10, ConvertThresholdedRelu));
  t->push_back(MakeConverter("PRelu", 7, ConvertPRelu));
}

}  // namespace kiln::onnx_import
