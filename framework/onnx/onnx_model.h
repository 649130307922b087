// Reading an ONNX model: parse the bytes, read external data from the model's
// folder, run onnx::checker and shape inference. Internal to framework/onnx/.
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

namespace kiln::onnx_import {

// Parses `bytes` as an onnx.ModelProto and prepares it for import:
//  - every tensor stored as external data (initializers, Constant values) is
//    read into raw_data from its file, named relative to `model_dir`; a
//    location that is absolute, goes through "..", or resolves (symlinks
//    followed) outside `model_dir` is refused naming it, as is external data
//    when `model_dir` is empty (a model given as bytes);
//  - onnx::checker::check_model, then onnx::shape_inference::InferShapes
//    (their exceptions become kiln::Error naming `source`).
// Throws kiln::Error starting with `source` (the file name, or "<bytes>").
onnx::ModelProto LoadModelProto(const std::string& bytes, const std::string& source, const std::string& model_dir);

}  // namespace kiln::onnx_import
