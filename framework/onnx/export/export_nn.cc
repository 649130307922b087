// Layers onto ONNX: matmul (Gemm for 2-D operands, MatMul with Transpose
// otherwise), conv2d, pool2d, batch_norm and dropout in inference form
// (is_test), layer_norm, softmax and fused_attention (decomposed).
#include "framework/onnx/export/export_ops.h"

namespace kiln::onnx_export {
namespace {

// X with its last two dims swapped.
std::string TransposedLast2(ExportContext& ctx, const std::string& x, size_t rank, const char* what) {
  std::vector<int64_t> perm;
  for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(i));
  std::swap(perm[rank - 1], perm[rank - 2]);
  const std::string out = ctx.Temp(what);
  SetAttr(ctx.Node("Transpose", {x}, {out}), "perm", perm);
  return out;
}

void Matmul(ExportContext& ctx) {
  const Dims x = ctx.InDims("X"), y = ctx.InDims("Y");
  if (x.size() < 2 || y.size() < 2) ctx.Refuse("a 1-D operand; ONNX export takes matmul of rank >= 2");
  const bool tx = ctx.Bool("transpose_X", false), ty = ctx.Bool("transpose_Y", false);
  const float alpha = ctx.Float("alpha", 1.0f);
  if (x.size() == 2 && y.size() == 2) {
    onnx::NodeProto* gemm = ctx.Node("Gemm", {ctx.In("X"), ctx.In("Y")}, {ctx.Out("Out")});
    if (tx) SetAttr(gemm, "transA", int64_t{1});
    if (ty) SetAttr(gemm, "transB", int64_t{1});
    if (alpha != 1.0f) SetAttr(gemm, "alpha", alpha);
    return;
  }
  const std::string a = tx ? TransposedLast2(ctx, ctx.In("X"), x.size(), "xt") : ctx.In("X");
  const std::string b = ty ? TransposedLast2(ctx, ctx.In("Y"), y.size(), "yt") : ctx.In("Y");
  if (alpha == 1.0f) {
    ctx.Node("MatMul", {a, b}, {ctx.Out("Out")});
    return;
  }
  const std::string product = ctx.Temp("product");
  ctx.Node("MatMul", {a, b}, {product});
  ctx.Node("Mul", {product, ctx.FloatScalar("alpha", alpha)}, {ctx.Out("Out")});
}

// kiln's paddings: [h, w] (both sides alike) or [top, bottom, left, right];
// ONNX's pads: [top, left, bottom, right].
std::vector<int64_t> OnnxPads(const ExportContext& ctx) {
  const std::vector<int64_t> p = ctx.Ints("paddings", {0, 0});
  if (p.size() == 2) return {p[0], p[1], p[0], p[1]};
  if (p.size() == 4) return {p[0], p[2], p[1], p[3]};
  ctx.Refuse("paddings has ", p.size(), " values; expected 2 or 4");
}

void Conv2d(ExportContext& ctx) {
  const Dims w = ctx.InDims("Filter");
  if (w.size() != 4 || w[2] < 0 || w[3] < 0) ctx.Refuse("Filter dims ", DimsToString(w), " are not a known OIHW");
  onnx::NodeProto* conv = ctx.Node("Conv", {ctx.In("Input"), ctx.In("Filter")}, {ctx.Out("Output")});
  SetAttr(conv, "kernel_shape", std::vector<int64_t>{w[2], w[3]});
  SetAttr(conv, "strides", ctx.Ints("strides", {1, 1}));
  SetAttr(conv, "pads", OnnxPads(ctx));
  SetAttr(conv, "dilations", ctx.Ints("dilations", {1, 1}));
  SetAttr(conv, "group", ctx.Int("groups", 1));
}

void Pool2d(ExportContext& ctx) {
  const std::string type = ctx.String("pooling_type", "max");
  if (type != "max" && type != "avg") ctx.Refuse("pooling_type '", type, "' is not max or avg");
  const bool max = type == "max";
  if (ctx.Bool("global_pooling", false)) {
    ctx.Node(max ? "GlobalMaxPool" : "GlobalAveragePool", {ctx.In("X")}, {ctx.Out("Out")});
    return;
  }
  onnx::NodeProto* pool = ctx.Node(max ? "MaxPool" : "AveragePool", {ctx.In("X")}, {ctx.Out("Out")});
  SetAttr(pool, "kernel_shape", ctx.Ints("ksize", {}));
  SetAttr(pool, "strides", ctx.Ints("strides", {1, 1}));
  SetAttr(pool, "pads", OnnxPads(ctx));
  if (!max) SetAttr(pool, "count_include_pad", int64_t{ctx.Bool("exclusive", true) ? 0 : 1});
}

// Inference only: normalised with the running statistics, which ONNX's
// BatchNormalization (training_mode 0) reads as kiln's is_test does.
void BatchNorm(ExportContext& ctx) {
  if (!ctx.Bool("is_test", false)) {
    ctx.Refuse("batch_norm in training mode (is_test false): ONNX export writes inference programs");
  }
  onnx::NodeProto* bn = ctx.Node("BatchNormalization",
                                 {ctx.In("X"), ctx.In("Scale"), ctx.In("Bias"), ctx.In("Mean"), ctx.In("Variance")},
                                 {ctx.Out("Y")});
  SetAttr(bn, "epsilon", ctx.Float("epsilon", 1e-5f));
  SetAttr(bn, "momentum", ctx.Float("momentum", 0.9f));
}

// kiln's Scale and Bias are flat [prod(normalised dims)]; ONNX's have the
// normalised dims (one dim: the same thing).
std::string NormParam(ExportContext& ctx, const char* slot, const Dims& norm, float fill) {
  if (ctx.HasIn(slot) && norm.size() == 1) return ctx.In(slot);
  for (int64_t d : norm) {
    if (d < 0) ctx.Refuse("normalised dims ", DimsToString(norm), " known only at run time");
  }
  if (!ctx.HasIn(slot)) {
    Tensor t(DataType::kFP32, norm);
    std::fill(t.mutable_data<float>(), t.mutable_data<float>() + t.numel(), fill);
    return ctx.Initializer(slot, t);
  }
  const std::string out = ctx.Temp(slot);
  ctx.Node("Reshape", {ctx.In(slot), ctx.Int64s("shape", norm)}, {out});
  return out;
}

void LayerNorm(ExportContext& ctx) {
  const Dims x = ctx.InDims("X");
  const int64_t axis = ctx.Int("begin_norm_axis", 1);
  if (axis < 1 || axis >= static_cast<int64_t>(x.size())) ctx.Refuse("begin_norm_axis ", axis, " outside X ", DimsToString(x));
  const Dims norm(x.begin() + axis, x.end());
  std::vector<std::string> inputs = {ctx.In("X"), NormParam(ctx, "Scale", norm, 1.0f)};
  if (ctx.HasIn("Bias")) inputs.push_back(NormParam(ctx, "Bias", norm, 0.0f));
  onnx::NodeProto* ln = ctx.Node("LayerNormalization", inputs, {ctx.Out("Y")});
  SetAttr(ln, "axis", axis);
  SetAttr(ln, "epsilon", ctx.Float("epsilon", 1e-5f));
}

void Softmax(ExportContext& ctx) {
  SetAttr(ctx.Node("Softmax", {ctx.In("X")}, {ctx.Out("Out")}), "axis", ctx.Int("axis", -1));
}

// is_test: the identity (upscale_in_train) or X * (1 - p) (downgrade_in_infer).
void Dropout(ExportContext& ctx) {
  if (!ctx.Bool("is_test", false)) {
    ctx.Refuse("dropout in training mode (is_test false): ONNX export writes inference programs");
  }
  const std::string impl = ctx.String("dropout_implementation", "upscale_in_train");
  if (impl == "upscale_in_train") {
    ctx.Node("Identity", {ctx.In("X")}, {ctx.Out("Out")});
    return;
  }
  const float keep = 1.0f - ctx.Float("dropout_prob", 0.5f);
  ctx.Node("Mul", {ctx.In("X"), ctx.FloatScalar("keep", keep)}, {ctx.Out("Out")});
}

// softmax(scale * Q @ K^T) @ V: ONNX opset 17 has no attention op.
void FusedAttention(ExportContext& ctx) {
  if (ctx.Bool("causal", false)) ctx.Refuse("causal attention (no ONNX export of the mask yet)");
  const Dims k = ctx.InDims("K");
  if (k.size() < 2) ctx.Refuse("K ", DimsToString(k), " has rank < 2");
  const std::string scores = ctx.Temp("scores"), scaled = ctx.Temp("scaled"), probs = ctx.Temp("probs");
  ctx.Node("MatMul", {ctx.In("Q"), TransposedLast2(ctx, ctx.In("K"), k.size(), "kt")}, {scores});
  ctx.Node("Mul", {scores, ctx.FloatScalar("scale", ctx.Float("scale", 1.0f))}, {scaled});
  SetAttr(ctx.Node("Softmax", {scaled}, {probs}), "axis", int64_t{-1});
  ctx.Node("MatMul", {probs, ctx.In("V")}, {ctx.Out("Out")});
}

}  // namespace

void AddNnExporters(ExportTable* t) {
  (*t)["matmul"] = Matmul;
  (*t)["conv2d"] = Conv2d;
  (*t)["pool2d"] = Pool2d;
  (*t)["batch_norm"] = BatchNorm;
  (*t)["layer_norm"] = LayerNorm;
  (*t)["softmax"] = Softmax;
  (*t)["dropout"] = Dropout;
  (*t)["fused_attention"] = FusedAttention;
}

}  // namespace kiln::onnx_export
