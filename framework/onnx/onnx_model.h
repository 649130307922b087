// Reading an ONNX model: parse the bytes, read external data from the model's
// folder, run onnx::checker; and ONNX's shape inference, which the importer
// runs on a model it has converted (libonnx 1.12's inference crashes on
// inputs of the wrong rank that the checker lets through, and kiln's
// converters refuse those first). Internal to framework/onnx/.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <onnx/onnx_pb.h>

#include "framework/tensor.h"

namespace kiln::onnx_import {

// What ONNX says of a value: element type (0: unknown), dims (-1 unknown).
struct OnnxValueInfo {
  int32_t elem_type = 0;
  std::optional<Dims> dims;
};
OnnxValueInfo ValueInfoOf(const onnx::ValueInfoProto& v);

// Parses `bytes` as an onnx.ModelProto and prepares it for import:
//  - every tensor stored as external data (initializers, Constant values) is
//    read into raw_data from its file, named relative to `model_dir`; a
//    location that is absolute, goes through "..", or resolves (symlinks
//    followed) outside `model_dir` is refused naming it, as is external data
//    when `model_dir` is empty (a model given as bytes);
//  - onnx::checker::check_model (its exceptions become kiln::Error naming
//    `source`), and attributes ONNX's shape inference divides by checked
//    positive.
// Throws kiln::Error starting with `source` (the file name, or "<bytes>").
onnx::ModelProto LoadModelProto(const std::string& bytes, const std::string& source, const std::string& model_dir);

// onnx::shape_inference::InferShapes over `model` with its graph inputs'
// dims replaced by `input_dims` (what the import used; -1 unknown) and the
// shapes it recorded for other values dropped, so all are inferred anew.
// Returns each value's element type and dims; its exceptions become
// kiln::Error naming `source`.
std::map<std::string, OnnxValueInfo> InferValueInfo(onnx::ModelProto model,
                                                    const std::map<std::string, Dims>& input_dims,
                                                    const std::string& source);

}  // namespace kiln::onnx_import
