// Integer arithmetic on constants, which kiln's elementwise ops (f32/f64
// only) cannot fold: Add, Sub, Mul, Div (truncating) and Neg of int64/int32 constants, with
// numpy broadcasting, wrapping as two's complement. Exporters compute shapes
// this way (rank - axis). Internal to framework/onnx/.
#pragma once

#include <onnx/onnx_pb.h>

#include "framework/onnx/import_context.h"

namespace kiln::onnx_import {

// True when `node` is such an op on integer constants in `ic`; then its
// output is bound in `ic` as a constant.
bool FoldIntegerArithmetic(const onnx::NodeProto& node, int index, ImportContext& ic);

}  // namespace kiln::onnx_import
