// Tile, Expand, Pad and CumSum onto tile, expand_v2, pad and cumsum. Their
// repeats, shape, pads and axis are kiln attributes, so those inputs must be
// known at import (constants, initializers, or inputs bound with
// OnnxImportOptions::input_values); a run-time one is refused naming it.
#include <cmath>

#include "framework/onnx/convert_util.h"
#include "framework/onnx/converter_table.h"

namespace kiln::onnx_import {
namespace {

void ConvertTile(NodeContext& ctx) {
  const std::vector<int64_t> repeats = ctx.ConstantInts(1, "repeats");
  if (repeats.size() != ctx.InputDims(0).size()) {
    ctx.Refuse("repeats ", DimsToString(repeats), " has ", repeats.size(), " values for input rank ",
               ctx.InputDims(0).size());
  }
  for (int64_t r : repeats) {
    if (r < 0) ctx.Refuse("repeats ", DimsToString(repeats), ": expected values >= 0");
  }
  ctx.Op1("tile", {{"X", {ctx.Input(0)}}}, {{"repeat_times", repeats}}, ctx.Out(0));
}

// Out = X broadcast with `shape` (numpy's rule, both ways): expand_v2's
// attribute, where a 1 keeps X's dim as in ONNX.
void ConvertExpand(NodeContext& ctx) {
  const std::vector<int64_t> shape = ctx.ConstantInts(1, "the shape");
  for (int64_t d : shape) {
    if (d < 0) ctx.Refuse("the shape ", DimsToString(shape), ": expected values >= 0");
  }
  ctx.Op1("expand_v2", {{"X", {ctx.Input(0)}}}, {{"shape", shape}}, ctx.Out(0));
}

// `value` as pad's f32 pad_value, refused when X's dtype holds it and f32
// does not (pad converts pad_value to X's dtype).
float PadValue(const NodeContext& ctx, double value) {
  const float f = static_cast<float>(value);
  if (static_cast<double>(f) != value && !std::isnan(value)) {
    ctx.Refuse("constant_value ", value, " is not an f32 value (pad's pad_value is one)");
  }
  return f;
}

// Opsets 2-10: attributes pads and value; 11+: inputs pads and
// constant_value. ONNX lists every begin, then every end; kiln's paddings
// are (begin, end) pairs per dim.
void ConvertPad(NodeContext& ctx) {
  const std::string mode = ctx.String("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    ctx.Refuse("mode '", mode, "': expected constant, reflect or edge");
  }
  std::vector<int64_t> pads;
  double value = 0;
  if (ctx.opset() < 11) {
    pads = ctx.Ints("pads");
    value = ctx.Float("value", 0.0f);
  } else {
    pads = ctx.ConstantInts(1, "pads");
    if (ctx.HasInput(2)) value = ctx.ConstantScalar(2, "constant_value");
  }
  const size_t rank = ctx.InputDims(0).size();
  if (pads.size() != 2 * rank) {
    ctx.Refuse("pads ", DimsToString(pads), " has ", pads.size(), " values for input rank ", rank, " (expected ",
               2 * rank, ")");
  }
  std::vector<int64_t> paddings;
  for (size_t d = 0; d < rank; ++d) {
    paddings.push_back(pads[d]);
    paddings.push_back(pads[rank + d]);
  }
  ctx.Op1("pad", {{"X", {ctx.Input(0)}}},
          {{"paddings", paddings}, {"mode", mode}, {"pad_value", PadValue(ctx, value)}}, ctx.Out(0));
}

void ConvertCumSum(NodeContext& ctx) {
  const std::vector<int64_t> axis = ctx.ConstantInts(1, "axis");
  if (axis.size() != 1) ctx.Refuse("axis ", DimsToString(axis), ": expected one value");
  const int64_t rank = static_cast<int64_t>(ctx.InputDims(0).size());
  ctx.Op1("cumsum", {{"X", {ctx.Input(0)}}},
          {{"axis", NormAxis(ctx, axis[0], rank, "axis")},
           {"exclusive", ctx.Int("exclusive", 0) != 0},
           {"reverse", ctx.Int("reverse", 0) != 0}},
          ctx.Out(0));
}

}  // namespace

void AddTilePadConverters(std::vector<Converter>* t) {
  // Tile's repeats became an input in opset 6; Expand is 8+; Pad's opset 1
  // named the attribute paddings.
  t->push_back(MakeConverter("Tile", 6, ConvertTile));
  t->push_back(MakeConverter("Expand", 8, ConvertExpand));
  t->push_back(MakeConverter("Pad", 2, ConvertPad));
  t->push_back(MakeConverter("CumSum", 11, ConvertCumSum));
}

}  // namespace kiln::onnx_import
