#include "framework/onnx/export/export_context.h"

#include <cstring>

#include "framework/attribute.h"
#include "framework/onnx/onnx_tensor.h"
#include "framework/op_desc.h"

namespace kiln::onnx_export {
namespace {

// One var of a slot, not @EMPTY@; "" when the slot has none.
std::string OneArg(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a != kEmptyVarName) return a;
  }
  return "";
}

}  // namespace

ExportContext::ExportContext(const proto::BlockDesc& block, const Scope& scope, onnx::GraphProto* graph)
    : block_(block), scope_(scope), graph_(graph) {}

void ExportContext::Begin(const proto::OpDesc& op, int index) {
  op_ = &op;
  index_ = index;
}

void ExportContext::RefuseMessage(const std::string& why) const {
  const std::vector<std::string> outs = OutputVars(*op_);
  ThrowInvalidArgument("onnx export: ", OpLabel(*op_, index_), " (output '", outs.empty() ? "" : outs[0], "'): ", why);
}

bool ExportContext::HasIn(const std::string& slot) const { return !OneArg(InputArgs(*op_, slot)).empty(); }
bool ExportContext::HasOut(const std::string& slot) const { return !OneArg(OutputArgs(*op_, slot)).empty(); }

const proto::VarDesc* ExportContext::Var(const std::string& slot, bool input) const {
  const std::vector<std::string> args = input ? InputArgs(*op_, slot) : OutputArgs(*op_, slot);
  if (args.size() > 1) Refuse((input ? "input " : "output "), slot, " holds ", args.size(), " vars; ONNX takes one");
  const std::string var = OneArg(args);
  if (var.empty()) Refuse("has no ", (input ? "input " : "output "), slot);
  const proto::VarDesc* v = FindVarDesc(block_, var);
  if (v == nullptr) Refuse("var '", var, "' (", slot, ") is not declared in the program");
  return v;
}

std::string ExportContext::In(const std::string& slot) const { return Current(Var(slot, true)->name()); }

std::vector<std::string> ExportContext::Ins(const std::string& slot) const {
  std::vector<std::string> out;
  for (const auto& var : InputArgs(*op_, slot)) {
    if (var != kEmptyVarName) out.push_back(Current(var));
  }
  if (out.empty()) Refuse("has no input ", slot);
  return out;
}

std::string ExportContext::Current(const std::string& var) const {
  auto it = current_.find(var);
  if (it == current_.end()) {
    Refuse("reads var '", var, "', which is neither fed, a parameter, nor made by an exported op");
  }
  return it->second;
}

std::string ExportContext::Out(const std::string& slot) {
  const std::string var = Var(slot, false)->name();
  const std::string name = used_.count(var) ? Fresh(var) : var;
  used_.insert(name);
  current_[var] = name;
  return name;
}

Dims ExportContext::InDims(const std::string& slot) const { return VarDims(*Var(slot, true)); }

const Tensor* ExportContext::InValue(const std::string& slot) const {
  const proto::VarDesc* v = Var(slot, true);
  if (!v->persistable()) return nullptr;
  const Variable* var = scope_.FindVar(v->name());
  return var != nullptr && var->Get().initialized() ? &var->Get() : nullptr;
}

int64_t ExportContext::Int(const std::string& name, int64_t def) const {
  const proto::AttrDesc* a = FindAttr(*op_, name);
  if (a == nullptr) return def;
  const Attribute v = AttrFromProto(*a);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  Refuse("attribute ", name, " is ", AttrKindName(KindOf(v)), ", expected INT");
}

float ExportContext::Float(const std::string& name, float def) const {
  const proto::AttrDesc* a = FindAttr(*op_, name);
  if (a == nullptr) return def;
  const Attribute v = AttrFromProto(*a);
  if (const auto* f = std::get_if<float>(&v)) return *f;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<float>(*i);
  Refuse("attribute ", name, " is ", AttrKindName(KindOf(v)), ", expected FLOAT");
}

bool ExportContext::Bool(const std::string& name, bool def) const { return Int(name, def ? 1 : 0) != 0; }

std::string ExportContext::String(const std::string& name, const std::string& def) const {
  const proto::AttrDesc* a = FindAttr(*op_, name);
  if (a == nullptr) return def;
  const Attribute v = AttrFromProto(*a);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  Refuse("attribute ", name, " is ", AttrKindName(KindOf(v)), ", expected STRING");
}

std::vector<int64_t> ExportContext::Ints(const std::string& name, const std::vector<int64_t>& def) const {
  const proto::AttrDesc* a = FindAttr(*op_, name);
  if (a == nullptr) return def;
  const Attribute v = AttrFromProto(*a);
  if (const auto* is = std::get_if<std::vector<int64_t>>(&v)) return *is;
  if (const auto* i = std::get_if<int64_t>(&v)) return {*i};
  Refuse("attribute ", name, " is ", AttrKindName(KindOf(v)), ", expected INTS");
}

onnx::NodeProto* ExportContext::Node(const std::string& type, const std::vector<std::string>& inputs,
                                     const std::vector<std::string>& outputs) {
  onnx::NodeProto* node = graph_->add_node();
  node->set_op_type(type);
  node->set_name(StrCat(op_->type(), "_", index_, "_", nodes_++));
  for (const auto& in : inputs) node->add_input(in);
  for (const auto& out : outputs) node->add_output(out);
  return node;
}

std::string ExportContext::Fresh(const std::string& base) {
  for (int i = 1;; ++i) {
    std::string name = StrCat(base, "__", i);
    if (!used_.count(name)) return name;
  }
}

std::string ExportContext::Temp(const std::string& what) {
  const std::vector<std::string> outs = OutputVars(*op_);
  const std::string name = Fresh(StrCat(outs.empty() ? op_->type() : outs[0], ".", what));
  used_.insert(name);
  return name;
}

std::string ExportContext::Initializer(const std::string& what, const Tensor& value) {
  const std::string name = Temp(what);
  *graph_->add_initializer() = TensorToProto(value, name);
  return name;
}

std::string ExportContext::Int64s(const std::string& what, const std::vector<int64_t>& values) {
  Tensor t(DataType::kINT64, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.mutable_data<int64_t>());
  return Initializer(what, t);
}

std::string ExportContext::FloatScalar(const std::string& what, float value) {
  Tensor t(DataType::kFP32, {});
  *t.mutable_data<float>() = value;
  return Initializer(what, t);
}

void ExportContext::AddParameter(const std::string& var) {
  const Variable* v = scope_.FindVar(var);
  if (v == nullptr || !v->Get().initialized()) {
    ThrowInvalidArgument("onnx export: parameter '", var, "' has no value (the checkpoint does not hold it)");
  }
  *graph_->add_initializer() = TensorToProto(v->Get(), var);
  used_.insert(var);
  current_[var] = var;
}

void ExportContext::DefineInput(const std::string& var) {
  used_.insert(var);
  current_[var] = var;
}

void SetAttr(onnx::NodeProto* node, const std::string& name, int64_t value) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

void SetAttr(onnx::NodeProto* node, const std::string& name, float value) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(value);
}

void SetAttr(onnx::NodeProto* node, const std::string& name, const std::string& value) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

void SetAttr(onnx::NodeProto* node, const std::string& name, const std::vector<int64_t>& values) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}

onnx::TensorProto TensorToProto(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.set_name(name);
  const int32_t type = onnx_import::OnnxDtype(t.dtype());
  if (type == onnx::TensorProto::UNDEFINED) {
    ThrowUnimplemented("onnx export: '", name, "' is ", DataTypeName(t.dtype()), ", which ONNX export does not write");
  }
  p.set_data_type(type);
  for (int64_t d : t.dims()) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char*>(t.raw_data()), t.bytes()));
  return p;
}

}  // namespace kiln::onnx_export
