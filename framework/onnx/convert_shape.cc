// Layout and indexing ONNX ops: Reshape, Flatten, Squeeze, Unsqueeze
// (reshape2), Transpose, Concat, Split, Slice, Gather, GatherElements
// (take_along_axis), OneHot, Identity.
#include <algorithm>
#include <numeric>

#include "framework/onnx/convert_util.h"
#include "framework/onnx/converter_table.h"

namespace kiln::onnx_import {
namespace {

// The shape input's 0 copies the input's dim and -1 is inferred, as in
// reshape2; allowzero (opset 14) makes 0 a zero-size dim, which no kiln var has.
void ConvertReshape(NodeContext& ctx) {
  const std::vector<int64_t> shape = ctx.ConstantInts(1, "the shape");
  if (ctx.Int("allowzero", 0) != 0 && std::count(shape.begin(), shape.end(), 0) > 0) {
    ctx.Refuse("allowzero with a 0 in the shape ", DimsToString(shape), " makes a zero-size tensor");
  }
  ctx.Op1("reshape2", {{"X", {ctx.Input(0)}}}, {{"shape", shape}}, ctx.Out(0));
}

int64_t KnownProduct(const Dims& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) {
    if (d[i] < 0) return -1;
    p *= d[i];
  }
  return p;
}

void ConvertFlatten(NodeContext& ctx) {
  const Dims x = ctx.InputDims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = ctx.Int("axis", 1);
  if (axis < -rank || axis > rank) ctx.Refuse("axis ", axis, " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  const Dims to = {KnownProduct(x, 0, a), KnownProduct(x, a, x.size())};
  ReshapeTo(ctx, ctx.Input(0), x, to, {a == 1 ? 0 : -1, -1}, ctx.Out(0));
}

void ConvertTranspose(NodeContext& ctx) {
  const int64_t rank = static_cast<int64_t>(ctx.InputDims(0).size());
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.rbegin(), perm.rend(), 0);  // default: the dims reversed
  perm = ctx.Ints("perm", perm);
  ctx.Op1("transpose2", {{"X", {ctx.Input(0)}}}, {{"axis", perm}}, ctx.Out(0));
}

// Axes from the attribute (before opset 13) or from input 1 (13+).
std::vector<int64_t> AxesOf(NodeContext& ctx, bool* given) {
  if (ctx.opset() >= 13) {
    *given = ctx.HasInput(1);
    return *given ? ctx.ConstantInts(1, "axes") : std::vector<int64_t>{};
  }
  *given = ctx.Attr("axes") != nullptr;
  return ctx.Ints("axes");
}

void ConvertSqueeze(NodeContext& ctx) {
  const Dims x = ctx.InputDims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  bool given = false;
  std::vector<int64_t> axes = NormAxes(ctx, AxesOf(ctx, &given), rank, "axes");
  if (!given) {
    for (int64_t i = 0; i < rank; ++i) {
      if (x[i] < 0) ctx.Refuse("without axes it squeezes the dims of size 1, and dim ", i, " is known only at run time");
      if (x[i] == 1) axes.push_back(i);
    }
  }
  Dims to;
  std::vector<int> src;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
      if (x[i] > 1) ctx.Refuse("axis ", i, " has size ", x[i], ", not 1");
      continue;
    }
    to.push_back(x[i]);
    src.push_back(static_cast<int>(i));
  }
  ReshapeTo(ctx, ctx.Input(0), x, to, src, ctx.Out(0));
}

void ConvertUnsqueeze(NodeContext& ctx) {
  const Dims x = ctx.InputDims(0);
  bool given = false;
  const std::vector<int64_t> raw = AxesOf(ctx, &given);
  if (!given) ctx.Refuse("axes are required");
  const int64_t out_rank = static_cast<int64_t>(x.size() + raw.size());
  const std::vector<int64_t> axes = NormAxes(ctx, raw, out_rank, "axes");
  Dims to;
  std::vector<int> src;
  int next = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
      to.push_back(1);
      src.push_back(-1);
    } else {
      to.push_back(x[static_cast<size_t>(next)]);
      src.push_back(next++);
    }
  }
  ReshapeTo(ctx, ctx.Input(0), x, to, src, ctx.Out(0));
}

void ConvertConcat(NodeContext& ctx) {
  const int64_t rank = static_cast<int64_t>(ctx.InputDims(0).size());
  if (ctx.Attr("axis") == nullptr) ctx.Refuse("attribute axis is required");
  const int64_t axis = NormAxis(ctx, ctx.Int("axis", 0), rank, "axis");
  std::vector<std::string> xs;
  for (size_t i = 0; i < ctx.InputCount(); ++i) xs.push_back(ctx.Input(i));
  ctx.Op1("concat", {{"X", xs}}, {{"axis", axis}}, ctx.Out(0));
}

void ConvertSplit(NodeContext& ctx) {
  const int64_t rank = static_cast<int64_t>(ctx.InputDims(0).size());
  const int64_t axis = NormAxis(ctx, ctx.Int("axis", 0), rank, "axis");
  std::vector<int64_t> sizes;
  if (ctx.opset() < 13) {
    sizes = ctx.Ints("split");
  } else if (ctx.HasInput(1)) {
    sizes = ctx.ConstantInts(1, "split");
  }
  std::vector<std::string> outs;
  for (size_t i = 0; i < ctx.OutputCount(); ++i) {
    outs.push_back(ctx.HasOutput(i) ? ctx.Out(i) : ctx.Temp("unused"));
  }
  if (!sizes.empty() && sizes.size() != outs.size()) {
    ctx.Refuse("split ", DimsToString(sizes), " has ", sizes.size(), " sizes for ", outs.size(), " outputs");
  }
  AttrMap attrs = {{"axis", axis}};
  if (sizes.empty()) {
    attrs["num"] = static_cast<int64_t>(outs.size());
  } else {
    attrs["sections"] = sizes;
  }
  ctx.Op("split", {{"X", {ctx.Input(0)}}}, {{"Out", outs}}, attrs);
}

// Opsets 1-9: starts/ends/axes attributes; 10+: inputs, steps must be 1.
void ConvertSlice(NodeContext& ctx) {
  const int64_t rank = static_cast<int64_t>(ctx.InputDims(0).size());
  std::vector<int64_t> starts, ends, axes;
  if (ctx.opset() < 10) {
    starts = ctx.Ints("starts");
    ends = ctx.Ints("ends");
    axes = ctx.Ints("axes");
  } else {
    starts = ctx.ConstantInts(1, "starts");
    ends = ctx.ConstantInts(2, "ends");
    if (ctx.HasInput(3)) axes = ctx.ConstantInts(3, "axes");
    if (ctx.HasInput(4)) {
      for (int64_t s : ctx.ConstantInts(4, "steps")) {
        if (s != 1) ctx.Refuse("step ", s, ": kiln's slice takes step 1 only");
      }
    }
  }
  if (starts.size() != ends.size()) ctx.Refuse("starts and ends differ in length");
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (axes.size() != starts.size()) ctx.Refuse("axes and starts differ in length");
  axes = NormAxes(ctx, axes, rank, "axes");
  ctx.Op1("slice", {{"Input", {ctx.Input(0)}}}, {{"axes", axes}, {"starts", starts}, {"ends", ends}}, ctx.Out(0));
}

// kiln's gather takes indices [K] and replaces the axis dim by K; other
// index ranks are flattened into it and the result reshaped (a scalar index
// drops the axis). Negative indices count from the end in both. Not
// lookup_table, whose ids must be in [0, V): it would be exact only for
// indices known at import, which gather takes as well. Indices known at
// import are checked here, so a bad one refuses the node.
void ConvertGather(NodeContext& ctx) {
  const Dims x = ctx.InputDims(0);
  const int64_t axis = NormAxis(ctx, ctx.Int("axis", 0), static_cast<int64_t>(x.size()), "axis");
  const Dims idx = ctx.InputDims(1);
  if (ctx.Constant(1) != nullptr && x[axis] >= 0) {
    const std::vector<int64_t> values = ctx.ConstantInts(1, "indices");
    for (int64_t v : values) {
      if (v < -x[axis] || v >= x[axis]) ctx.Refuse("index ", v, " is out of range for dim ", x[axis]);
    }
  }
  std::string index = ctx.Input(1, VarRole::kConstant);
  if (idx.size() != 1) {
    int64_t k = 1;
    for (int64_t d : idx) k = d < 0 || k < 0 ? -1 : k * d;
    index = ReshapeTo(ctx, index, idx, {k}, {-1});
  }
  if (idx.size() == 1) {
    ctx.Op1("gather", {{"X", {ctx.Input(0)}}, {"Index", {index}}}, {{"axis", axis}}, ctx.Out(0));
    return;
  }
  const std::string g = ctx.Op1("gather", {{"X", {ctx.Input(0)}}, {"Index", {index}}}, {{"axis", axis}});
  Dims to(x.begin(), x.begin() + axis);
  std::vector<int> src(to.size());
  std::iota(src.begin(), src.end(), 0);
  for (int64_t d : idx) {
    to.push_back(d);
    src.push_back(-1);
  }
  for (size_t k = static_cast<size_t>(axis) + 1; k < x.size(); ++k) {
    to.push_back(x[k]);
    src.push_back(-1);
  }
  ReshapeTo(ctx, g, ctx.VarDims(g), to, src, ctx.Out(0));
}

// take_along_axis is GatherElements: Index of Input's rank, Result of its
// dims, negative indices counting from the end in both.
void ConvertGatherElements(NodeContext& ctx) {
  const int64_t axis = NormAxis(ctx, ctx.Int("axis", 0), static_cast<int64_t>(ctx.InputDims(0).size()), "axis");
  ctx.Op1("take_along_axis", {{"Input", {ctx.Input(0)}}, {"Index", {ctx.Input(1, VarRole::kConstant)}}},
          {{"Axis", axis}}, ctx.Out(0), "Result");
}

// one_hot of the indices with a trailing 1 dim; ONNX's negative indices
// count from the end and out-of-range ones give a row of zeros, so the
// indices must be known at import (made non-negative; out-of-range ones
// stay out of range, which allow_out_of_range turns into zeros). kiln's
// one_hot writes f32 zeros and ones along the last axis.
void ConvertOneHot(NodeContext& ctx) {
  const int64_t rank = static_cast<int64_t>(ctx.InputDims(0).size());
  const int64_t axis = ctx.Int("axis", -1);
  if (axis != -1 && axis != rank) ctx.Refuse("axis ", axis, ": kiln's one_hot adds the last axis");
  const double depth_value = ctx.ConstantScalar(1, "depth");
  const int64_t depth = static_cast<int64_t>(depth_value);
  if (depth < 1 || static_cast<double>(depth) != depth_value) ctx.Refuse("depth ", depth_value, ": expected >= 1");
  const Tensor& values = ctx.RequireConstant(2, "values");
  if (values.dtype() != DataType::kFP32 || values.numel() != 2 || values.data<float>()[0] != 0 ||
      values.data<float>()[1] != 1) {
    ctx.Refuse("values must be float [0, 1]: kiln's one_hot writes f32 zeros and ones");
  }
  if (ctx.Constant(0) == nullptr) {
    ctx.Refuse("indices computed at run time may be negative, which ONNX counts from the end and kiln's one_hot "
               "refuses; kiln imports OneHot with indices known at import");
  }
  const Dims idx = ctx.InputDims(0);
  const std::vector<int64_t> raw = ctx.ConstantInts(0, "indices");
  Tensor fixed(DataType::kINT64, idx);
  fixed.Resize([&] {
    Dims d = idx;
    d.push_back(1);
    return d;
  }());
  for (size_t k = 0; k < raw.size(); ++k) {
    fixed.mutable_data<int64_t>()[k] = raw[k] < 0 && raw[k] >= -depth ? raw[k] + depth : raw[k];
  }
  ctx.Op1("one_hot", {{"X", {ctx.ConstantVar("indices", fixed)}}},
          {{"depth", depth}, {"allow_out_of_range", true}}, ctx.Out(0));
}

void ConvertIdentity(NodeContext& ctx) { ctx.Alias(0, ctx.Input(0)); }

}  // namespace

void AddShapeConverters(std::vector<Converter>* t) {
  t->push_back(MakeConverter("Reshape", 5, ConvertReshape));
  t->push_back(MakeConverter("Flatten", 1, ConvertFlatten));
  t->push_back(MakeConverter("Transpose", 1, ConvertTranspose));
  t->push_back(MakeConverter("Squeeze", 1, ConvertSqueeze));
  t->push_back(MakeConverter("Unsqueeze", 1, ConvertUnsqueeze));
  t->push_back(MakeConverter("Concat", 4, ConvertConcat));
  t->push_back(MakeConverter("Split", 2, ConvertSplit));
  t->push_back(MakeConverter("Slice", 1, ConvertSlice));
  t->push_back(MakeConverter("Gather", 1, ConvertGather));
  t->push_back(MakeConverter("GatherElements", 11, ConvertGatherElements));
  t->push_back(MakeConverter("OneHot", 9, ConvertOneHot));
  t->push_back(MakeConverter("Identity", 1, ConvertIdentity));
}

}  // namespace kiln::onnx_import
