// Reductions along axes: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSumExp,
// ArgMax/ArgMin, and Softmax/LogSoftmax (whose opsets before 13 work on a 2-D flattening).
#include <numeric>

#include "framework/onnx/convert_util.h"
#include "framework/onnx/converter_table.h"

namespace kiln::onnx_import {
namespace {

// Every output dim gone: ONNX's result is a scalar, kiln's reduce gives [1]
// (kept dims: [1,...,1]), so it is reshaped to [].
void Reduce(NodeContext& ctx, const char* kiln_op, std::vector<int64_t> axes, bool have_axes) {
  const Dims& x = ctx.InputDims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  const bool keep = ctx.Int("keepdims", 1) != 0;
  if (!have_axes || axes.empty()) {
    if (have_axes && ctx.Int("noop_with_empty_axes", 0) != 0) {
      ctx.Alias(0, ctx.Input(0));
      return;
    }
    axes.resize(static_cast<size_t>(rank));
    std::iota(axes.begin(), axes.end(), 0);
  }
  axes = NormAxes(ctx, axes, rank, "axes");
  const bool to_scalar = !keep && static_cast<int64_t>(axes.size()) == rank;
  const AttrMap attrs = {{"dim", axes}, {"keep_dim", keep || to_scalar}, {"reduce_all", false}};
  if (!to_scalar) {
    ctx.Op1(kiln_op, {{"X", {ctx.Input(0)}}}, attrs, ctx.Out(0));
    return;
  }
  const std::string r = ctx.Op1(kiln_op, {{"X", {ctx.Input(0)}}}, attrs);
  ctx.Op1("reshape2", {{"X", {r}}}, {{"shape", std::vector<int64_t>{}}}, ctx.Out(0));
}

// Axes from the attribute (ReduceSum before 13, the others before 18) or
// from input 1 (ReduceSum 13+, the others 18+), which must be known at import.
void ReduceWithAxes(NodeContext& ctx, const char* kiln_op, bool axes_input) {
  if (axes_input) {
    const bool have = ctx.HasInput(1);
    Reduce(ctx, kiln_op, have ? ctx.ConstantInts(1, "axes") : std::vector<int64_t>{}, have);
    return;
  }
  Reduce(ctx, kiln_op, ctx.Ints("axes"), ctx.Attr("axes") != nullptr);
}

void ConvertReduceSum(NodeContext& ctx) { ReduceWithAxes(ctx, "reduce_sum", ctx.opset() >= 13); }
void ConvertReduceMean(NodeContext& ctx) { ReduceWithAxes(ctx, "reduce_mean", false); }
void ConvertReduceMax(NodeContext& ctx) { ReduceWithAxes(ctx, "reduce_max", false); }
void ConvertReduceMin(NodeContext& ctx) { ReduceWithAxes(ctx, "reduce_min", false); }
void ConvertReduceProd(NodeContext& ctx) { ReduceWithAxes(ctx, "reduce_prod", ctx.opset() >= 18); }
void ConvertReduceL1(NodeContext& ctx) { ReduceWithAxes(ctx, "reduce_l1", ctx.opset() >= 18); }
void ConvertReduceL2(NodeContext& ctx) { ReduceWithAxes(ctx, "reduce_l2", ctx.opset() >= 18); }
void ConvertReduceLogSumExp(NodeContext& ctx) { ReduceWithAxes(ctx, "logsumexp", ctx.opset() >= 18); }

void Arg(NodeContext& ctx, const char* kiln_op) {
  ctx.RequireIntAttr("select_last_index", 0, "kiln's arg ops give the first index of ties");
  const int64_t rank = static_cast<int64_t>(ctx.InputDims(0).size());
  const int64_t axis = NormAxis(ctx, ctx.Int("axis", 0), rank, "axis");
  ctx.Op1(kiln_op, {{"X", {ctx.Input(0)}}}, {{"axis", axis}, {"keepdims", ctx.Int("keepdims", 1) != 0}}, ctx.Out(0));
}

void ConvertArgMax(NodeContext& ctx) { Arg(ctx, "arg_max"); }
void ConvertArgMin(NodeContext& ctx) { Arg(ctx, "arg_min"); }

int64_t Product(const Dims& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) {
    if (d[i] < 0) return -1;
    p *= d[i];
  }
  return p;
}

// Opset 13+: along `axis`. Before 13: over the 2-D flattening
// [prod(dims[:axis]), prod(dims[axis:])], which is the same when axis is the
// last dim and otherwise a reshape, the op along the last axis, and a
// reshape back (as ONNX defines it).
void SoftmaxLike(NodeContext& ctx, const char* kiln_op) {
  const Dims x = ctx.InputDims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  const bool flattens = ctx.opset() < 13;
  const int64_t axis = NormAxis(ctx, ctx.Int("axis", flattens ? 1 : -1), rank, "axis");
  if (!flattens || axis == rank - 1) {
    ctx.Op1(kiln_op, {{"X", {ctx.Input(0)}}}, {{"axis", axis}}, ctx.Out(0));
    return;
  }
  const size_t a = static_cast<size_t>(axis);
  const Dims flat = {Product(x, 0, a), Product(x, a, x.size())};
  const std::string f = ReshapeTo(ctx, ctx.Input(0), x, flat, {a == 1 ? 0 : -1, -1});
  const std::string s = ctx.Op1(kiln_op, {{"X", {f}}}, {{"axis", int64_t{-1}}});
  std::vector<int> src(x.size(), -1);
  if (a == 1) src[0] = 0;
  ReshapeTo(ctx, s, flat, x, src, ctx.Out(0));
}

void ConvertSoftmax(NodeContext& ctx) { SoftmaxLike(ctx, "softmax"); }
void ConvertLogSoftmax(NodeContext& ctx) { SoftmaxLike(ctx, "log_softmax"); }

}  // namespace

void AddReduceConverters(std::vector<Converter>* t) {
  t->push_back(MakeConverter("ReduceSum", 1, ConvertReduceSum));
  t->push_back(MakeConverter("ReduceMean", 1, ConvertReduceMean));
  t->push_back(MakeConverter("ReduceMax", 1, ConvertReduceMax));
  t->push_back(MakeConverter("ReduceMin", 1, ConvertReduceMin));
  t->push_back(MakeConverter("ReduceProd", 1, ConvertReduceProd));
  t->push_back(MakeConverter("ReduceL1", 1, ConvertReduceL1));
  t->push_back(MakeConverter("ReduceL2", 1, ConvertReduceL2));
  t->push_back(MakeConverter("ReduceLogSumExp", 1, ConvertReduceLogSumExp));
  t->push_back(MakeConverter("ArgMax", 1, ConvertArgMax));
  t->push_back(MakeConverter("ArgMin", 1, ConvertArgMin));
  t->push_back(MakeConverter("Softmax", 1, ConvertSoftmax));
  t->push_back(MakeConverter("LogSoftmax", 1, ConvertLogSoftmax));
}

}  // namespace kiln::onnx_import
