// 2-D convolution and pooling: Conv, MaxPool, AveragePool, GlobalAveragePool,
// GlobalMaxPool onto conv2d (+ the bias as elementwise_add) and pool2d,
// whose paddings are symmetric.
#include "framework/onnx/convert_util.h"
#include "framework/onnx/converter_table.h"

namespace kiln::onnx_import {
namespace {

void Require2D(const NodeContext& ctx, const Dims& x) {
  if (x.size() != 4) {
    ctx.Refuse("input ", DimsToString(x), " is not NCHW: kiln's conv2d and pool2d are 2-D (", x.size() - 2,
               "-D here)");
  }
}

// [ph, pw] from pads / auto_pad; kiln pads the same on both sides.
std::vector<int64_t> SymmetricPads(const NodeContext& ctx, const Dims& x, const std::vector<int64_t>& kernel,
                                   const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations) {
  const std::string auto_pad = ctx.String("auto_pad", "NOTSET");
  if (auto_pad == "VALID") return {0, 0};
  std::vector<int64_t> begin(2), end(2);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t k = 0; k < 2; ++k) {
      const int64_t in = x[k + 2];
      if (in < 0) ctx.Refuse("auto_pad ", auto_pad, " needs the spatial dims, and dim ", k + 2, " is known at run time");
      const int64_t out = (in + strides[k] - 1) / strides[k];
      const int64_t total =
          std::max<int64_t>(0, (out - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - in);
      begin[k] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end[k] = total - begin[k];
    }
  } else if (auto_pad == "NOTSET") {
    const std::vector<int64_t> pads = ctx.Ints("pads", {0, 0, 0, 0});
    if (pads.size() != 4) ctx.Refuse("pads ", DimsToString(pads), ": expected 4 values");
    begin = {pads[0], pads[1]};
    end = {pads[2], pads[3]};
  } else {
    ctx.Refuse("auto_pad '", auto_pad, "' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER");
  }
  if (begin != end) {
    ctx.Refuse("pads begin ", DimsToString(begin), " and end ", DimsToString(end),
               " differ; kiln pads both sides of a dim alike");
  }
  return begin;
}

std::vector<int64_t> Pair(const NodeContext& ctx, const std::string& name, const std::vector<int64_t>& def) {
  const std::vector<int64_t> v = ctx.Ints(name, def);
  if (v.size() != 2) ctx.Refuse("attribute ", name, " ", DimsToString(v), ": expected 2 values (2-D)");
  for (int64_t d : v) {
    if (d < 1) ctx.Refuse("attribute ", name, " ", DimsToString(v), ": expected positive values");
  }
  return v;
}

void ConvertConv(NodeContext& ctx) {
  const Dims x = ctx.InputDims(0);
  const Dims w = ctx.InputDims(1);
  Require2D(ctx, x);
  if (w.size() != 4) ctx.Refuse("weight ", DimsToString(w), " is not 4-D");
  const std::vector<int64_t> kernel = ctx.Ints("kernel_shape", {w[2], w[3]});
  if (kernel != std::vector<int64_t>{w[2], w[3]}) {
    ctx.Refuse("kernel_shape ", DimsToString(kernel), " differs from the weight's ", DimsToString(w));
  }
  const std::vector<int64_t> strides = Pair(ctx, "strides", {1, 1});
  const std::vector<int64_t> dilations = Pair(ctx, "dilations", {1, 1});
  const AttrMap attrs = {{"strides", strides},
                         {"paddings", SymmetricPads(ctx, x, kernel, strides, dilations)},
                         {"dilations", dilations},
                         {"groups", ctx.Int("group", 1)}};
  const bool bias = ctx.HasInput(2);
  const std::string out = bias ? ctx.Temp("conv") : ctx.Out(0);
  ctx.Op("conv2d", {{"Input", {ctx.Input(0)}}, {"Filter", {ctx.Input(1)}}}, {{"Output", {out}}}, attrs);
  if (bias) ctx.Op1("elementwise_add", {{"X", {out}}, {"Y", {ctx.Input(2)}}}, {{"axis", int64_t{1}}}, ctx.Out(0));
}

// The output size of one spatial dim, floor or ceil of the window count.
int64_t PoolOut(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil) {
  const int64_t span = in + 2 * p - k;
  return (ceil ? (span + s - 1) / s : span / s) + 1;
}

void Pool(NodeContext& ctx, const char* type, bool exclusive) {
  const Dims x = ctx.InputDims(0);
  Require2D(ctx, x);
  if (ctx.OutputUsed(1)) ctx.Refuse("output Indices: kiln's pool2d gives no indices");
  const std::vector<int64_t> kernel = Pair(ctx, "kernel_shape", {});
  const std::vector<int64_t> strides = Pair(ctx, "strides", {1, 1});
  const std::vector<int64_t> dilations = Pair(ctx, "dilations", {1, 1});
  if (dilations != std::vector<int64_t>{1, 1}) ctx.Refuse("dilations ", DimsToString(dilations), ": pool2d has none");
  const std::vector<int64_t> pads = SymmetricPads(ctx, x, kernel, strides, dilations);
  // ceil_mode is fine where it changes nothing: the windows fit exactly.
  if (ctx.Int("ceil_mode", 0) != 0) {
    for (size_t k = 0; k < 2; ++k) {
      const int64_t in = x[k + 2];
      if (in < 0 || PoolOut(in, kernel[k], strides[k], pads[k], true) !=
                        PoolOut(in, kernel[k], strides[k], pads[k], false)) {
        ctx.Refuse("ceil_mode adds a partial window (dim ", k + 2, "); kiln's pool2d rounds down");
      }
    }
  }
  ctx.Op1("pool2d", {{"X", {ctx.Input(0)}}},
          {{"pooling_type", std::string(type)},
           {"ksize", kernel},
           {"strides", strides},
           {"paddings", pads},
           {"exclusive", exclusive}},
          ctx.Out(0));
}

void ConvertMaxPool(NodeContext& ctx) { Pool(ctx, "max", true); }
void ConvertAveragePool(NodeContext& ctx) { Pool(ctx, "avg", ctx.Int("count_include_pad", 0) == 0); }

void GlobalPool(NodeContext& ctx, const char* type) {
  Require2D(ctx, ctx.InputDims(0));
  ctx.Op1("pool2d", {{"X", {ctx.Input(0)}}},
          {{"pooling_type", std::string(type)}, {"ksize", std::vector<int64_t>{1, 1}}, {"global_pooling", true}},
          ctx.Out(0));
}

void ConvertGlobalAveragePool(NodeContext& ctx) { GlobalPool(ctx, "avg"); }
void ConvertGlobalMaxPool(NodeContext& ctx) { GlobalPool(ctx, "max"); }

}  // namespace

void AddConvPoolConverters(std::vector<Converter>* t) {
  t->push_back(MakeConverter("Conv", 1, ConvertConv));
  t->push_back(MakeConverter("MaxPool", 1, ConvertMaxPool));
  t->push_back(MakeConverter("AveragePool", 1, ConvertAveragePool));
  t->push_back(MakeConverter("GlobalAveragePool", 1, ConvertGlobalAveragePool));
  t->push_back(MakeConverter("GlobalMaxPool", 1, ConvertGlobalMaxPool));
}

}  // namespace kiln::onnx_import
