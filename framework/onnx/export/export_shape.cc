// Layout and indexing ops onto ONNX: reshape2 (Reshape: 0 copies a dim, one
// -1 is inferred, as ONNX's allowzero 0), transpose2, concat, cast and lookup_table
// (Squeeze of the ids' trailing 1, then Gather).
#include "framework/onnx/export/export_ops.h"
#include "framework/onnx/onnx_tensor.h"

namespace kiln::onnx_export {
namespace {

void Reshape2(ExportContext& ctx) {
  if (ctx.HasIn("Shape") || ctx.HasIn("ShapeTensor")) ctx.Refuse("a shape computed at run time");
  ctx.Node("Reshape", {ctx.In("X"), ctx.Int64s("shape", ctx.Ints("shape", {}))}, {ctx.Out("Out")});
}

void Transpose2(ExportContext& ctx) {
  SetAttr(ctx.Node("Transpose", {ctx.In("X")}, {ctx.Out("Out")}), "perm", ctx.Ints("axis", {}));
}

void Concat(ExportContext& ctx) {
  SetAttr(ctx.Node("Concat", ctx.Ins("X"), {ctx.Out("Out")}), "axis", ctx.Int("axis", 0));
}

void Cast(ExportContext& ctx) {
  const int64_t to = onnx_import::OnnxDtype(static_cast<DataType>(ctx.Int("out_dtype", 0)));
  if (to == onnx::TensorProto::UNDEFINED) ctx.Refuse("out_dtype ", ctx.Int("out_dtype", 0), " has no ONNX type");
  SetAttr(ctx.Node("Cast", {ctx.In("X")}, {ctx.Out("Out")}), "to", to);
}

void LookupTable(ExportContext& ctx) {
  if (ctx.Int("padding_idx", -1) != -1) ctx.Refuse("padding_idx ", ctx.Int("padding_idx", -1), " (zero rows) is not exported");
  const Dims ids = ctx.InDims("Ids");
  if (ids.empty() || ids.back() != 1) ctx.Refuse("Ids ", DimsToString(ids), " do not end in 1");
  const std::string flat = ctx.Temp("ids");
  ctx.Node("Squeeze", {ctx.In("Ids"), ctx.Int64s("axes", {-1})}, {flat});
  SetAttr(ctx.Node("Gather", {ctx.In("W"), flat}, {ctx.Out("Out")}), "axis", int64_t{0});
}

}  // namespace

void AddShapeExporters(ExportTable* t) {
  (*t)["reshape2"] = Reshape2;
  (*t)["transpose2"] = Transpose2;
  (*t)["cast"] = Cast;
  (*t)["concat"] = Concat;
  (*t)["lookup_table"] = LookupTable;
}

}  // namespace kiln::onnx_export
