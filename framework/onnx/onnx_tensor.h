// ONNX tensors and element types as kiln's: TensorProto -> Tensor, with every
// size checked before anything is allocated (the bytes may be anything).
// Internal to framework/onnx/ (includes the ONNX headers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <onnx/onnx_pb.h>

#include "framework/tensor.h"

namespace kiln::onnx_import {

// The kiln dtype of an ONNX TensorProto.DataType (FLOAT, DOUBLE, INT64,
// INT32, BOOL); nullopt for the others.
std::optional<DataType> KilnDtype(int32_t onnx_type);
// "float", "uint8", ...: ONNX's name of an element type, for messages.
std::string OnnxDtypeName(int32_t onnx_type);
// The ONNX element type of a kiln dtype.
int32_t OnnxDtype(DataType dtype);

// The most elements one tensor may hold (2^31): a larger claim in a model is
// refused before any allocation.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 31;
// The most elements a constant made at import may hold (2^24: 64 MiB of
// f32): ConstantOfShape and Range beyond it are refused rather than filled.
inline constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

// The values of `t`. External data must have been resolved into raw_data
// (onnx_model.h). Throws kiln::Error starting with `what` (e.g. "model.onnx:
// initializer 'w'") for an element type kiln has no dtype for, a negative
// dim, more than kMaxTensorElements elements, or data of the wrong size. A
// tensor with a zero dim comes back with its dims and no buffer.
Tensor TensorFromProto(const onnx::TensorProto& t, const std::string& what);

}  // namespace kiln::onnx_import
