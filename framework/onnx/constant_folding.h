// Folding a node whose inputs are all constants: its converter's kiln ops run
// at import on the constants, with kiln's own kernels. Internal to
// framework/onnx/.
#pragma once

#include <onnx/onnx_pb.h>

#include "framework/onnx/converter_table.h"
#include "framework/onnx/import_context.h"

namespace kiln::onnx_import {

// Converts `node` (index `index`) with `converter` into a scratch import
// whose inputs are fed vars holding the constants, runs what it emitted with
// the Executor (reference kernels), and binds the node's outputs in `ic` as
// constants. Refuses the node (OnnxImportError) when the converter does, when
// an input is a zero-size constant (no kiln var holds one), or when running
// fails.
void FoldNode(const Converter& converter, const onnx::NodeProto& node, int index, ImportContext& ic);

}  // namespace kiln::onnx_import
