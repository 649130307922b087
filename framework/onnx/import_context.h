// The state of one import and the view of one node that converters see.
//
// ImportContext holds the programs being built and what each ONNX value is:
// a kiln var computed at run time, a constant known at import (a Constant
// node, a folded result, a fed constant while folding), or an initializer.
// Constants and initializers become vars only when an op reads them as
// tensors: persistable vars that the startup program fills with
// assign_value. NodeContext is one node: its inputs, attributes and outputs,
// and emission of kiln ops into the main program. Internal to framework/onnx/.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "framework/attribute.h"
#include "framework/onnx/onnx_import.h"
#include "framework/program_builder.h"
#include "framework/validate.h"

namespace kiln::onnx_import {

// What a constant or initializer is once an op reads it as a var.
enum class VarRole {
  kParameter,  // trainable when it is a float initializer
  kState,      // updated in place by the program (running statistics): never trainable
  kConstant,   // read only
};

// kInitializer: a float initializer, a parameter unless it is frozen or an
// op reads it as state or as a constant operand; never folded. Other
// initializers are kConstant, as Constant nodes and folded results are.
struct Value {
  enum class Kind { kRuntime, kConstant, kInitializer };
  Kind kind = Kind::kRuntime;
  std::string var;  // "" until a constant or initializer is read as a var
  std::shared_ptr<const Tensor> constant;  // kConstant, kInitializer
  Dims dims;
  DataType dtype = DataType::kFP32;
  bool frozen = false;  // kInitializer: never trained (OnnxImportOptions::trainable)
};

class ImportContext {
 public:
  ImportContext(std::string source, int64_t opset);

  const std::string& source() const { return source_; }
  int64_t opset() const { return opset_; }
  proto::ProgramDesc& main() { return main_; }
  proto::ProgramDesc& startup() { return startup_; }
  const std::vector<std::string>& parameters() const { return parameters_; }
  const std::vector<std::string>& state() const { return state_; }
  const std::vector<std::string>& frozen() const { return frozen_; }

  // nullptr when the model has no such value (yet).
  const Value* Find(const std::string& onnx_name) const;
  void SetValue(const std::string& onnx_name, Value value);
  // A value fed at run time (graph input): declares its var (stop_gradient).
  std::string DeclareInput(const std::string& onnx_name, const Dims& dims, DataType dtype);
  // A constant that is also a fed var (the inputs of a node being folded).
  std::string DeclareFedConstant(const std::string& onnx_name, std::shared_ptr<const Tensor> value);

  // The var holding a value; a constant or initializer is declared persistable
  // (in both programs) and filled by an assign_value op in the startup
  // program the first time. Throws kiln::Error for a value assign_value cannot
  // hold (f64, zero-size).
  std::string Materialise(const std::string& onnx_name, VarRole role);
  // A persistable non-trainable var updated in place, filled by the startup
  // program from `value` (a dropout seed).
  std::string NewStateVar(const std::string& hint, const Tensor& value);
  // A persistable read-only var filled by the startup program from `value`
  // (a constant operand a converter needs, such as Mean's count).
  std::string NewConstantVar(const std::string& hint, const Tensor& value);

  // A var name unused in the main program, from an ONNX name or hint.
  std::string NewVarName(const std::string& hint);
  // Appends `op` to the main program and declares its outputs from kiln's
  // shape inference. An error (kiln::Error from the op's checks) propagates
  // and the import cannot go on (the context is thrown away).
  void Emit(const proto::OpDesc& op);
  const proto::VarDesc* FindVar(const std::string& var) const;

  // ONNX names read by some node or graph output.
  void SetUsed(std::set<std::string> used) { used_ = std::move(used); }
  bool IsUsed(const std::string& onnx_name) const { return used_.count(onnx_name) > 0; }

 private:
  std::string source_;
  int64_t opset_;
  proto::ProgramDesc main_ = EmptyProgram();
  proto::ProgramDesc startup_ = EmptyProgram();
  BlockVarIndex index_{main_.mutable_blocks(0)};
  std::map<std::string, Value> values_;
  std::set<std::string> names_;  // every var name given out
  std::vector<std::string> parameters_, state_, frozen_;
  std::string NewFilledVar(const std::string& hint, const Tensor& value);
  std::set<std::string> used_;
};

// One node as its converter sees it. Inputs and outputs are counted as in the
// NodeProto; an input given as "" (an omitted optional one) is absent.
class NodeContext {
 public:
  NodeContext(ImportContext& ic, const onnx::NodeProto& node, int index);

  ImportContext& import() { return ic_; }
  const onnx::NodeProto& node() const { return node_; }
  int index() const { return index_; }
  const std::string& op_type() const { return node_.op_type(); }
  int64_t opset() const { return ic_.opset(); }

  // ---- inputs
  size_t InputCount() const { return static_cast<size_t>(node_.input_size()); }
  bool HasInput(size_t i) const;
  const Value& InputValue(size_t i) const;  // refuses when absent
  const Dims& InputDims(size_t i) const { return InputValue(i).dims; }
  DataType InputDtype(size_t i) const { return InputValue(i).dtype; }
  // The var of input i (a constant or initializer becomes one: `role`).
  std::string Input(size_t i, VarRole role = VarRole::kParameter);
  // The input's value when known at import (a constant or an initializer).
  const Tensor* Constant(size_t i) const;
  // Refuses unless input i is known at import; `what` says what it is.
  const Tensor& RequireConstant(size_t i, const std::string& what) const;
  // An integer constant (i64/i32) as int64 values; a float constant scalar.
  std::vector<int64_t> ConstantInts(size_t i, const std::string& what) const;
  double ConstantScalar(size_t i, const std::string& what) const;

  // ---- attributes
  const onnx::AttributeProto* Attr(const std::string& name) const;
  int64_t Int(const std::string& name, int64_t def) const;
  float Float(const std::string& name, float def) const;
  std::string String(const std::string& name, const std::string& def) const;
  std::vector<int64_t> Ints(const std::string& name, const std::vector<int64_t>& def = {}) const;
  std::vector<float> Floats(const std::string& name) const;
  // Refuses when `name` is set to anything but `allowed` (ints) / is set at all.
  void RequireIntAttr(const std::string& name, int64_t allowed, const std::string& why) const;

  // ---- outputs
  size_t OutputCount() const { return static_cast<size_t>(node_.output_size()); }
  bool HasOutput(size_t i) const;
  // True when a later node or the graph reads output i.
  bool OutputUsed(size_t i) const;
  // The var reserved for output i (ops write it), named after the ONNX name.
  const std::string& Out(size_t i);
  // Output i is `var` (an identity) / a constant known at import.
  void Alias(size_t i, const std::string& var);
  void SetConstant(size_t i, Tensor value);
  // Binds every output of the node in the import (driver).
  void Commit();

  // ---- emission
  std::string Temp(const std::string& hint);
  // A read-only var holding `value` (ImportContext::NewConstantVar).
  std::string ConstantVar(const std::string& hint, const Tensor& value);
  // Appends a kiln op; a kiln shape/dtype check that fails refuses the node.
  void Op(const std::string& type, const SlotArgsList& inputs, const SlotArgsList& outputs, const AttrMap& attrs = {});
  // One output in slot `out_slot`, to `out` or a fresh temp var; returns it.
  std::string Op1(const std::string& type, const SlotArgsList& inputs, const AttrMap& attrs = {},
                  const std::string& out = "", const std::string& out_slot = "Out");
  Dims VarDims(const std::string& var) const;
  DataType VarDtype(const std::string& var) const;

  // Throws OnnxImportError naming the node, its op type and opset.
  template <typename... Args>
  [[noreturn]] void Refuse(const Args&... args) const {
    RefuseWith(ErrorCode::kUnimplemented, StrCat(args...));
  }
  [[noreturn]] void RefuseWith(ErrorCode code, const std::string& reason) const;

 private:
  std::string TempHint(const std::string& hint) const;
  OnnxRefusal Refusal(const std::string& reason) const;
  [[noreturn]] void Throw(ErrorCode code, OnnxRefusal refusal) const;

  ImportContext& ic_;
  const onnx::NodeProto& node_;
  int index_;
  std::vector<std::string> out_vars_;
  std::map<size_t, std::string> aliases_;
  std::map<size_t, std::shared_ptr<const Tensor>> constants_;
};

// "a/b:c" -> "a_b_c": the characters a kiln var name keeps ([A-Za-z0-9_.-]).
std::string SanitizeName(const std::string& onnx_name);

}  // namespace kiln::onnx_import
