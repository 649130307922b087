#include "framework/onnx/onnx_model.h"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>

#include "framework/error.h"
#include "framework/onnx/onnx_tensor.h"

namespace kiln::onnx_import {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

// The most bytes one external tensor may take: kMaxTensorElements doubles.
constexpr int64_t kMaxExternalBytes = kMaxTensorElements * 8;

int64_t ParseNonNegative(const std::string& text, const std::string& what) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) {
    ThrowInvalidArgument(what, ": expected a non-negative integer, got '", text, "'");
  }
  return std::stoll(text);
}

// The file `location` names, checked to stay inside `model_dir`.
fs::path ExternalPath(const std::string& location, const std::string& model_dir, const std::string& what) {
  if (model_dir.empty()) {
    ThrowInvalidArgument(what, ": external data '", location,
                         "' needs the model's folder (import the model from its file, not from bytes)");
  }
  const fs::path rel(location);
  if (location.empty() || location.find('\0') != std::string::npos) {
    ThrowInvalidArgument(what, ": external data has an empty location");
  }
  if (rel.is_absolute()) {
    ThrowInvalidArgument(what, ": external data location '", location,
                         "' is an absolute path; it must name a file inside the model's folder ", model_dir);
  }
  for (const fs::path& part : rel) {
    if (part == "..") {
      ThrowInvalidArgument(what, ": external data location '", location, "' leaves the model's folder ", model_dir,
                           " (it goes through '..')");
    }
  }
  std::error_code ec;
  const fs::path base = fs::canonical(model_dir, ec);
  if (ec) ThrowNotFound(what, ": cannot resolve the model's folder ", model_dir, " (", ec.message(), ")");
  const fs::path file = fs::canonical(base / rel, ec);
  if (ec) ThrowNotFound(what, ": external data file '", location, "' not found in ", model_dir, " (", ec.message(), ")");
  const std::string b = base.string() + "/";
  if (file.string().compare(0, b.size(), b) != 0) {
    ThrowInvalidArgument(what, ": external data location '", location, "' resolves to ", file.string(),
                         ", outside the model's folder ", model_dir, " (a symlink out of it)");
  }
  if (!fs::is_regular_file(file)) ThrowInvalidArgument(what, ": external data '", location, "' is not a regular file");
  return file;
}

// Reads the external data of `t` into raw_data.
void ResolveExternal(TensorProto* t, const std::string& model_dir, const std::string& what) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t->external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = ParseNonNegative(kv.value(), what + ": external data offset");
    if (kv.key() == "length") length = ParseNonNegative(kv.value(), what + ": external data length");
  }
  const fs::path file = ExternalPath(location, model_dir, what);
  std::error_code ec;
  const int64_t size = static_cast<int64_t>(fs::file_size(file, ec));
  if (ec) ThrowNotFound(what, ": cannot read external data '", location, "' (", ec.message(), ")");
  if (offset > size) {
    ThrowInvalidArgument(what, ": external data '", location, "' has ", size, " bytes; offset ", offset,
                         " is past its end");
  }
  if (length < 0) length = size - offset;
  if (length > size - offset) {
    ThrowInvalidArgument(what, ": external data '", location, "' has ", size, " bytes; offset ", offset, " length ",
                         length, " reaches past its end");
  }
  if (length > kMaxExternalBytes) ThrowInvalidArgument(what, ": external data of ", length, " bytes is too large");
  std::string bytes(static_cast<size_t>(length), '\0');
  std::ifstream in(file, std::ios::binary);
  in.seekg(offset);
  if (!in.read(bytes.data(), length)) ThrowNotFound(what, ": cannot read external data '", location, "'");
  t->clear_external_data();
  t->set_data_location(TensorProto::DEFAULT);
  t->set_raw_data(std::move(bytes));
}

// Visits every tensor of a graph, its nodes' attributes and their subgraphs.
void ForEachTensor(onnx::GraphProto* g, const std::string& prefix,
                   const std::function<void(TensorProto*, const std::string&)>& fn) {
  for (TensorProto& t : *g->mutable_initializer()) fn(&t, prefix + "initializer '" + t.name() + "'");
  for (onnx::NodeProto& n : *g->mutable_node()) {
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      const std::string what = prefix + "node '" + n.name() + "' attribute '" + a.name() + "'";
      if (a.has_t()) fn(a.mutable_t(), what);
      for (TensorProto& t : *a.mutable_tensors()) fn(&t, what);
      if (a.has_g()) ForEachTensor(a.mutable_g(), what + ": ", fn);
      for (onnx::GraphProto& sub : *a.mutable_graphs()) ForEachTensor(&sub, what + ": ", fn);
    }
  }
}

// ONNX 1.12's shape inference divides by these attributes without checking
// them (a stride of 0 is a SIGFPE in convPoolShapeInference), and the
// checker lets them through: they must be positive before it runs.
void CheckDivisorAttributes(const onnx::GraphProto& g, const std::string& source) {
  static const char* const kDivisors[] = {"strides", "dilations", "kernel_shape", "group", "blocksize"};
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    for (const onnx::AttributeProto& a : n.attribute()) {
      for (const char* name : kDivisors) {
        if (a.name() != name) continue;
        bool positive = a.i() > 0 || a.type() != onnx::AttributeProto::INT;
        for (int64_t v : a.ints()) positive = positive && v > 0;
        if (!positive) {
          ThrowInvalidArgument(source, ": node ", i, " '", n.name(), "' (", n.op_type(), "): attribute ", name,
                               " must be positive");
        }
      }
      if (a.has_g()) CheckDivisorAttributes(a.g(), source);
      for (const onnx::GraphProto& sub : a.graphs()) CheckDivisorAttributes(sub, source);
    }
  }
}

}  // namespace

onnx::ModelProto LoadModelProto(const std::string& bytes, const std::string& source, const std::string& model_dir) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) ThrowInvalidArgument(source, ": not an ONNX model (the protobuf does not parse)");
  if (!model.has_graph()) ThrowInvalidArgument(source, ": not an ONNX model (no graph)");
  ForEachTensor(model.mutable_graph(), source + ": ", [&](TensorProto* t, const std::string& what) {
    if (t->data_location() == TensorProto::EXTERNAL) ResolveExternal(t, model_dir, what);
  });
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    ThrowInvalidArgument(source, ": the ONNX checker rejects the model: ", e.what());
  }
  CheckDivisorAttributes(model.graph(), source);
  return model;
}

OnnxValueInfo ValueInfoOf(const onnx::ValueInfoProto& v) {
  OnnxValueInfo info;
  if (!v.type().has_tensor_type()) return info;
  const auto& t = v.type().tensor_type();
  info.elem_type = t.elem_type();
  if (!t.has_shape()) return info;
  Dims dims;
  for (const auto& d : t.shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  info.dims = dims;
  return info;
}

std::map<std::string, OnnxValueInfo> InferValueInfo(onnx::ModelProto model,
                                                    const std::map<std::string, Dims>& input_dims,
                                                    const std::string& source) {
  onnx::GraphProto* g = model.mutable_graph();
  g->clear_value_info();
  for (onnx::ValueInfoProto& out : *g->mutable_output()) {
    out.mutable_type()->mutable_tensor_type()->clear_shape();
  }
  for (onnx::ValueInfoProto& in : *g->mutable_input()) {
    auto it = input_dims.find(in.name());
    if (it == input_dims.end()) continue;
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : it->second) {
      auto* dim = shape->add_dim();
      if (d >= 0) dim->set_dim_value(d);
    }
  }
  try {
    onnx::shape_inference::InferShapes(model);
  } catch (const std::exception& e) {
    ThrowInvalidArgument(source, ": ONNX shape inference fails: ", e.what());
  }
  std::map<std::string, OnnxValueInfo> out;
  for (const auto* list : {&g->input(), &g->value_info(), &g->output()}) {
    for (const auto& v : *list) out[v.name()] = ValueInfoOf(v);
  }
  return out;
}

}  // namespace kiln::onnx_import
