// The ONNX importer: an ONNX model (onnx.ModelProto, as torch.onnx.export
// writes it) as a kiln main program and the startup program that fills its
// parameters, for kiln to run and train.
//
// Each ONNX node becomes the kiln registry ops that compute exactly what it
// computes (framework/onnx/converter_table.cc lists them by op type and
// opset, and what is missing). Constant sub-graphs (Constant, Shape, and
// what only reads constants) are folded at import by running the node's kiln
// ops on the constants. A model with a node kiln cannot express fails before
// anything runs, with an OnnxImportError naming the node (index and name),
// its op type and opset and what is missing; nothing is returned half.
//
// This header does not include the ONNX headers: only framework/onnx/ does.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <set>
#include <vector>

#include "framework/error.h"
#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"

namespace kiln {

struct OnnxImportOptions {
  // Dims of graph inputs by their ONNX name, in place of the model's own
  // (value_info); -1 marks a dim known only at run time. A model dim that is
  // symbolic (dim_param) or absent is -1 too.
  std::map<std::string, Dims> input_shapes;
  // Graph inputs bound to a value at import: constants (folded where they
  // meet other constants), not fed. For inputs kiln needs known at import
  // (a Reshape's shape, Slice's starts, a Clip bound) that the model leaves
  // as inputs. The dtype must be the model's, the dims compatible with its.
  std::map<std::string, Tensor> input_values;
  // ONNX has no flag for what trains: PyTorch exports parameters and buffers
  // (a causal mask, a position table) alike as initializers. When set, the
  // float initializers named here are the parameters and every other one is
  // frozen (persistable, never trained); a name that is no float initializer
  // of the model is an error. When unset, every float initializer a
  // differentiable input reads is a parameter, except those holding an inf
  // or NaN (a -inf mask), which no optimizer step could train.
  std::optional<std::set<std::string>> trainable;
};

struct OnnxImport {
  proto::ProgramDesc main;
  // assign_value ops filling every persistable var `main` reads (the
  // initializers it uses and the constants it needs as tensors).
  proto::ProgramDesc startup;
  // The vars to feed, one per graph input that is not an initializer, and
  // the vars holding the graph's outputs, in graph order.
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> onnx_inputs;  // their ONNX names, as `inputs`
  std::vector<std::string> onnx_outputs;
  // ONNX name -> kiln var of each graph input and output (kiln var names
  // are the ONNX names with characters outside [A-Za-z0-9_.-] as '_').
  std::map<std::string, std::string> var_of;
  // Persistable vars: float initializers a differentiable slot reads
  // (trainable, stop_gradient false); vars the program updates in place
  // (BatchNormalization's running statistics in training mode, dropout
  // seeds), non-trainable.
  std::vector<std::string> parameters;
  std::vector<std::string> state;
  // Float initializers read where a parameter could be that are not trained
  // (OnnxImportOptions::trainable).
  std::vector<std::string> frozen;
  int64_t opset = 0;  // of the default ONNX domain
};

// What a refused node is and why.
struct OnnxRefusal {
  int node_index = -1;
  std::string node_name;
  std::string op_type;
  int64_t opset = 0;
  std::string reason;
  // When the node needs an input known at import that is computed at run
  // time: its ONNX name (a graph input can be bound: input_values).
  std::string needs_constant;
};

// A kiln::Error; refusal() is set when a node cannot be imported (the model
// itself may be fine), empty when the file or model is bad.
class OnnxImportError : public Error {
 public:
  OnnxImportError(ErrorCode code, const std::string& message, std::optional<OnnxRefusal> refusal = std::nullopt)
      : Error(code, message), refusal_(std::move(refusal)) {}
  const std::optional<OnnxRefusal>& refusal() const { return refusal_; }

 private:
  std::optional<OnnxRefusal> refusal_;
};

// Imports the model file at `path`; external data is read relative to its
// folder. Throws kiln::Error (OnnxImportError for a refused node) naming the
// file.
OnnxImport ImportOnnxModel(const std::string& path, const OnnxImportOptions& options = {});
// The same from the bytes of a model; `source` names it in errors and
// `model_dir` is where its external data lives ("": it may have none).
OnnxImport ImportOnnxModelFromBytes(const std::string& bytes, const OnnxImportOptions& options = {},
                                    const std::string& source = "<bytes>", const std::string& model_dir = "");

// A TensorProto file (ONNX's test data: input_0.pb, output_0.pb) as a kiln
// tensor; throws naming the file. `dims_of_empty` receives the dims of a
// tensor with a zero dim (no kiln tensor holds one) when given.
Tensor ReadOnnxTensorFile(const std::string& path, Dims* dims_of_empty = nullptr);

// What a model file holds, parsed only (no checks): the op type of every
// node in graph order, and the names of the graph's inputs that are not
// initializers and of its outputs. Throws naming the file when it does not
// parse.
struct OnnxModelSummary {
  std::vector<std::string> op_types;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
};
OnnxModelSummary SummarizeOnnxModel(const std::string& path);

// The importer's table: each ONNX op type it knows, the opsets its
// converter handles, or why kiln cannot import it.
struct OnnxOpSupport {
  std::string op_type;
  int since = 0;  // first and last opset handled (0: not importable)
  int until = 0;
  std::string missing;  // why not, when not importable
};
std::vector<OnnxOpSupport> OnnxOpTable();

}  // namespace kiln
