// The exporter's table: each kiln op it maps onto ONNX (opset 17) and the
// function that adds its nodes. One file per op family adds its entries.
// Internal to framework/onnx/.
#pragma once

#include <map>
#include <string>

#include "framework/onnx/export/export_context.h"

namespace kiln::onnx_export {

// Adds the nodes computing the op ctx.op() (which ctx.Begin set); throws
// through ctx.Refuse when an attribute or shape has no ONNX form.
using ExportFn = void (*)(ExportContext& ctx);
using ExportTable = std::map<std::string, ExportFn>;

void AddMathExporters(ExportTable* table);   // export_math.cc: elementwise, activations, scale, reductions
void AddNnExporters(ExportTable* table);     // export_nn.cc: matmul, conv2d, pool2d, norms, softmax, dropout
void AddShapeExporters(ExportTable* table);  // export_shape.cc: reshape2, transpose2, lookup_table

// Every entry, built once.
const ExportTable& Exporters();

}  // namespace kiln::onnx_export
