// What the ONNX exporter's per-op functions share: the graph being built, the
// kiln block it comes from, and the names that connect the two. Internal to
// framework/onnx/ (includes the ONNX headers).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "framework/error.h"
#include "framework/proto/framework.pb.h"
#include "framework/scope.h"
#include "framework/tensor.h"

namespace kiln::onnx_export {

// Exports one kiln op at a time (export_ops.h's table says which function
// exports which op).
// ONNX values keep the kiln var names; a var an op writes again (in place)
// gets a fresh ONNX name, and later readers see that one.
class ExportContext {
 public:
  ExportContext(const proto::BlockDesc& block, const Scope& scope, onnx::GraphProto* graph);

  // The op being exported and its index, for names and messages.
  void Begin(const proto::OpDesc& op, int index);
  const proto::OpDesc& op() const { return *op_; }

  // Throws InvalidArgument "onnx export: op #3 'pool2d' (output 'x'): <why>".
  template <typename... Args>
  [[noreturn]] void Refuse(const Args&... args) const;
  [[noreturn]] void RefuseMessage(const std::string& why) const;

  // The ONNX value an input slot's (only) var holds; HasIn: the slot has one.
  bool HasIn(const std::string& slot) const;
  std::string In(const std::string& slot) const;
  // Every var of a duplicable input slot (concat's X...), in order.
  std::vector<std::string> Ins(const std::string& slot) const;
  // The ONNX name an output slot's var gets (fresh if the var exists).
  bool HasOut(const std::string& slot) const;
  std::string Out(const std::string& slot);
  // Dims of a slot's var as the program declares them (-1: run time).
  Dims InDims(const std::string& slot) const;
  // The value of a persistable input (a parameter) when the scope holds it.
  const Tensor* InValue(const std::string& slot) const;

  // Attributes of the kiln op, with defaults when absent.
  int64_t Int(const std::string& name, int64_t def) const;
  float Float(const std::string& name, float def) const;
  bool Bool(const std::string& name, bool def) const;
  std::string String(const std::string& name, const std::string& def) const;
  std::vector<int64_t> Ints(const std::string& name, const std::vector<int64_t>& def) const;

  // Adds a node; its name is the op's label plus a counter.
  onnx::NodeProto* Node(const std::string& type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs);
  // A fresh value name derived from the op's first output.
  std::string Temp(const std::string& what);
  // Constants as initializers: int64 [n], a float scalar, a float tensor.
  std::string Int64s(const std::string& what, const std::vector<int64_t>& values);
  std::string FloatScalar(const std::string& what, float value);
  std::string Initializer(const std::string& what, const Tensor& value);

  // A kiln var as an ONNX initializer (its value from the scope).
  void AddParameter(const std::string& var);
  // Marks a var as defined under its own name (a graph input).
  void DefineInput(const std::string& var);
  // The ONNX name a kiln var holds now; throws naming the op when undefined.
  std::string Current(const std::string& var) const;
  bool Defined(const std::string& var) const { return current_.count(var) != 0; }

 private:
  const proto::VarDesc* Var(const std::string& slot, bool input) const;
  std::string Fresh(const std::string& base);

  const proto::BlockDesc& block_;
  const Scope& scope_;
  onnx::GraphProto* graph_;
  const proto::OpDesc* op_ = nullptr;
  int index_ = -1;
  int nodes_ = 0;
  std::map<std::string, std::string> current_;  // kiln var -> ONNX value
  std::set<std::string> used_;                  // every ONNX value name
};

void SetAttr(onnx::NodeProto* node, const std::string& name, int64_t value);
void SetAttr(onnx::NodeProto* node, const std::string& name, float value);
void SetAttr(onnx::NodeProto* node, const std::string& name, const std::string& value);
void SetAttr(onnx::NodeProto* node, const std::string& name, const std::vector<int64_t>& values);

// kiln's Tensor as an ONNX TensorProto (raw_data, little-endian as on x86).
onnx::TensorProto TensorToProto(const Tensor& t, const std::string& name);

template <typename... Args>
void ExportContext::Refuse(const Args&... args) const {
  RefuseMessage(StrCat(args...));
}

}  // namespace kiln::onnx_export
