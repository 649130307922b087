// The ONNX exporter: a kiln inference program (block 0 of a ProgramDesc, as
// framework/checkpoint/inference.h prunes it) and its parameter values as an
// ONNX model (opset 17) that onnx::checker and ONNX's strict shape inference
// accept, and that the importer (onnx_import.h) reads back to a program
// computing the same outputs.
//
// The feeds become the graph inputs (their declared dims, -1 as a symbolic
// dim: "batch" for dim 0), the persistable vars the ops read become
// initializers, the fetches the graph outputs. Each op maps onto ONNX nodes
// (framework/onnx/export/: one file per op family); ops behaving differently
// in training (batch_norm, dropout) must be in inference form (is_test).
// An op with no mapping, or with attributes its mapping cannot express,
// fails before anything is written, naming the op, its index and its first
// output var.
//
// This header does not include the ONNX headers: only framework/onnx/ does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"
#include "framework/scope.h"

namespace kiln {

struct OnnxExportOptions {
  std::string graph_name = "kiln";
  std::string doc;  // the graph's doc_string: where the model came from
};

// The serialized onnx.ModelProto. Throws kiln::Error (InvalidArgument for a
// program it cannot express, Unimplemented for an op with no mapping).
std::string ExportOnnxModelBytes(const proto::ProgramDesc& program, const std::vector<std::string>& feeds,
                                 const std::vector<std::string>& fetches, const Scope& scope,
                                 const OnnxExportOptions& options = {});

// The same, written to `path` atomically (nothing is left there on error).
void ExportOnnxModel(const std::string& path, const proto::ProgramDesc& program, const std::vector<std::string>& feeds,
                     const std::vector<std::string>& fetches, const Scope& scope,
                     const OnnxExportOptions& options = {});

// The ONNX opset the exporter writes, and the kiln ops it maps.
inline constexpr int64_t kOnnxExportOpset = 17;
std::vector<std::string> OnnxExportableOps();

}  // namespace kiln
