#include "framework/onnx/import_context.h"

#include <algorithm>
#include <cctype>

#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/ops/assign_value_op.h"

namespace kiln::onnx_import {
namespace {

bool IsFloat(DataType d) { return d == DataType::kFP32 || d == DataType::kFP64; }

proto::VarDesc* DeclareVar(proto::ProgramDesc& program, const std::string& name, const Dims& dims, DataType dtype) {
  proto::VarDesc* v = program.mutable_blocks(0)->add_vars();
  v->set_name(name);
  v->set_dtype(ToProto(dtype));
  for (int64_t d : dims) v->add_dims(d);
  return v;
}

}  // namespace

std::string SanitizeName(const std::string& onnx_name) {
  std::string out;
  for (unsigned char c : onnx_name) {
    if (out.empty() && c == '/') continue;  // torch's "/layer1/Conv_output_0"
    out += std::isalnum(c) || c == '_' || c == '.' || c == '-' ? static_cast<char>(c) : '_';
  }
  return out.empty() ? "v" : out;
}

ImportContext::ImportContext(std::string source, int64_t opset) : source_(std::move(source)), opset_(opset) {}

const Value* ImportContext::Find(const std::string& onnx_name) const {
  auto it = values_.find(onnx_name);
  return it == values_.end() ? nullptr : &it->second;
}

void ImportContext::SetValue(const std::string& onnx_name, Value value) { values_[onnx_name] = std::move(value); }

std::string ImportContext::NewVarName(const std::string& hint) {
  const std::string base = SanitizeName(hint);
  std::string name = base;
  for (int k = 1; names_.count(name) > 0; ++k) name = base + "_" + std::to_string(k);
  names_.insert(name);
  return name;
}

const proto::VarDesc* ImportContext::FindVar(const std::string& var) const {
  return const_cast<BlockVarIndex&>(index_).Find(var);
}

std::string ImportContext::DeclareInput(const std::string& onnx_name, const Dims& dims, DataType dtype) {
  const std::string var = NewVarName(onnx_name);
  DeclareVar(main_, var, dims, dtype)->set_stop_gradient(true);
  values_[onnx_name] = Value{Value::Kind::kRuntime, var, nullptr, dims, dtype};
  return var;
}

std::string ImportContext::DeclareFedConstant(const std::string& onnx_name, std::shared_ptr<const Tensor> value) {
  const std::string var = NewVarName(onnx_name);
  DeclareVar(main_, var, value->dims(), value->dtype())->set_stop_gradient(true);
  const Dims dims = value->dims();
  const DataType dtype = value->dtype();
  values_[onnx_name] = Value{Value::Kind::kConstant, var, std::move(value), dims, dtype};
  return var;
}

std::string ImportContext::Materialise(const std::string& onnx_name, VarRole role) {
  Value& v = values_.at(onnx_name);
  const bool trainable =
      v.kind == Value::Kind::kInitializer && role == VarRole::kParameter && IsFloat(v.dtype) && !v.frozen;
  if (!v.var.empty()) {
    // An initializer read as a parameter before and as state now (a running
    // statistic also read elsewhere) is state: never trained.
    auto p = std::find(parameters_.begin(), parameters_.end(), v.var);
    if (role == VarRole::kState && p != parameters_.end()) {
      parameters_.erase(p);
      state_.push_back(v.var);
      const_cast<proto::VarDesc*>(FindVar(v.var))->set_stop_gradient(true);
    }
    return v.var;
  }
  const Tensor& t = *v.constant;
  if (t.numel() == 0) {
    ThrowUnimplemented("'", onnx_name, "' is a zero-size tensor ", DimsToString(t.dims()),
                       ", and a kiln var holds at least one element");
  }
  if (t.dtype() == DataType::kFP64) {
    ThrowUnimplemented("'", onnx_name, "' is a double constant, and assign_value holds float, int64, int32 and bool");
  }
  v.var = NewVarName(onnx_name);
  proto::VarDesc* desc = DeclareVar(main_, v.var, t.dims(), t.dtype());
  desc->set_persistable(true);
  desc->set_stop_gradient(!trainable);
  DeclareVar(startup_, v.var, t.dims(), t.dtype())->set_persistable(true);
  *startup_.mutable_blocks(0)->add_ops() = AssignValueOp(v.var, t);
  if (trainable) parameters_.push_back(v.var);
  if (role == VarRole::kState) state_.push_back(v.var);
  if (v.frozen && role == VarRole::kParameter) frozen_.push_back(v.var);
  return v.var;
}

std::string ImportContext::NewFilledVar(const std::string& hint, const Tensor& value) {
  if (value.dtype() == DataType::kFP64) {
    ThrowUnimplemented("'", hint, "' would be a double constant, and assign_value holds float, int64, int32 and bool");
  }
  const std::string var = NewVarName(hint);
  proto::VarDesc* desc = DeclareVar(main_, var, value.dims(), value.dtype());
  desc->set_persistable(true);
  desc->set_stop_gradient(true);
  DeclareVar(startup_, var, value.dims(), value.dtype())->set_persistable(true);
  *startup_.mutable_blocks(0)->add_ops() = AssignValueOp(var, value);
  return var;
}

std::string ImportContext::NewStateVar(const std::string& hint, const Tensor& value) {
  const std::string var = NewFilledVar(hint, value);
  state_.push_back(var);
  return var;
}

std::string ImportContext::NewConstantVar(const std::string& hint, const Tensor& value) {
  return NewFilledVar(hint, value);
}

void ImportContext::Emit(const proto::OpDesc& op) {
  proto::BlockDesc* b = main_.mutable_blocks(0);
  *b->add_ops() = op;
  InferShapeAtBuild(b, b->ops_size() - 1, /*declare_outputs=*/true, OpRegistry::Global(), &index_);
}

// ---- NodeContext -------------------------------------------------------------

NodeContext::NodeContext(ImportContext& ic, const onnx::NodeProto& node, int index)
    : ic_(ic), node_(node), index_(index), out_vars_(static_cast<size_t>(node.output_size())) {}

bool NodeContext::HasInput(size_t i) const { return i < InputCount() && !node_.input(static_cast<int>(i)).empty(); }

const Value& NodeContext::InputValue(size_t i) const {
  if (!HasInput(i)) Refuse("input ", i, " is required and missing");
  const std::string& name = node_.input(static_cast<int>(i));
  const Value* v = ic_.Find(name);
  if (v == nullptr) {
    RefuseWith(ErrorCode::kInvalidArgument,
               "input '" + name + "' is no graph input, initializer or output of an earlier node");
  }
  return *v;
}

std::string NodeContext::Input(size_t i, VarRole role) {
  InputValue(i);
  try {
    return ic_.Materialise(node_.input(static_cast<int>(i)), role);
  } catch (const OnnxImportError&) {
    throw;
  } catch (const Error& e) {
    RefuseWith(e.code(), StrCat("input ", i, ": ", e.what()));
  }
}

const Tensor* NodeContext::Constant(size_t i) const {
  if (!HasInput(i)) return nullptr;
  const Value& v = InputValue(i);
  return v.kind == Value::Kind::kRuntime ? nullptr : v.constant.get();
}

const Tensor& NodeContext::RequireConstant(size_t i, const std::string& what) const {
  const Tensor* t = Constant(i);
  if (t == nullptr) {
    InputValue(i);  // refuses a missing input with its own message
    const std::string& name = node_.input(static_cast<int>(i));
    OnnxRefusal r = Refusal(StrCat(what, " (input ", i, " '", name,
                                   "') is computed at run time; kiln needs it known at import (a constant or an "
                                   "initializer)"));
    r.needs_constant = name;
    Throw(ErrorCode::kUnimplemented, std::move(r));
  }
  return *t;
}

std::vector<int64_t> NodeContext::ConstantInts(size_t i, const std::string& what) const {
  const Tensor& t = RequireConstant(i, what);
  const int64_t n = t.numel();
  if (n == 0) return {};
  if (t.dtype() == DataType::kINT64) return {t.data<int64_t>(), t.data<int64_t>() + n};
  if (t.dtype() == DataType::kINT32) return {t.data<int32_t>(), t.data<int32_t>() + n};
  Refuse(what, " (input ", i, ") must be int64 or int32, got ", DataTypeName(t.dtype()));
}

double NodeContext::ConstantScalar(size_t i, const std::string& what) const {
  const Tensor& t = RequireConstant(i, what);
  if (t.numel() != 1) Refuse(what, " (input ", i, ") must hold one value, got ", DimsToString(t.dims()));
  switch (t.dtype()) {
    case DataType::kFP32:
      return t.data<float>()[0];
    case DataType::kFP64:
      return t.data<double>()[0];
    case DataType::kINT64:
      return static_cast<double>(t.data<int64_t>()[0]);
    case DataType::kINT32:
      return t.data<int32_t>()[0];
    default:
      return t.data<bool>()[0] ? 1.0 : 0.0;
  }
}

const onnx::AttributeProto* NodeContext::Attr(const std::string& name) const {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t NodeContext::Int(const std::string& name, int64_t def) const {
  const onnx::AttributeProto* a = Attr(name);
  if (a == nullptr) return def;
  if (a->type() != onnx::AttributeProto::INT) Refuse("attribute ", name, ": expected an INT");
  return a->i();
}

float NodeContext::Float(const std::string& name, float def) const {
  const onnx::AttributeProto* a = Attr(name);
  if (a == nullptr) return def;
  if (a->type() != onnx::AttributeProto::FLOAT) Refuse("attribute ", name, ": expected a FLOAT");
  return a->f();
}

std::string NodeContext::String(const std::string& name, const std::string& def) const {
  const onnx::AttributeProto* a = Attr(name);
  if (a == nullptr) return def;
  if (a->type() != onnx::AttributeProto::STRING) Refuse("attribute ", name, ": expected a STRING");
  return a->s();
}

std::vector<int64_t> NodeContext::Ints(const std::string& name, const std::vector<int64_t>& def) const {
  const onnx::AttributeProto* a = Attr(name);
  if (a == nullptr) return def;
  if (a->type() != onnx::AttributeProto::INTS) Refuse("attribute ", name, ": expected INTS");
  return {a->ints().begin(), a->ints().end()};
}

std::vector<float> NodeContext::Floats(const std::string& name) const {
  const onnx::AttributeProto* a = Attr(name);
  if (a == nullptr) return {};
  if (a->type() != onnx::AttributeProto::FLOATS) Refuse("attribute ", name, ": expected FLOATS");
  return {a->floats().begin(), a->floats().end()};
}

void NodeContext::RequireIntAttr(const std::string& name, int64_t allowed, const std::string& why) const {
  const int64_t v = Int(name, allowed);
  if (v != allowed) Refuse("attribute ", name, " = ", v, ": ", why);
}

bool NodeContext::HasOutput(size_t i) const { return i < OutputCount() && !node_.output(static_cast<int>(i)).empty(); }

bool NodeContext::OutputUsed(size_t i) const { return HasOutput(i) && ic_.IsUsed(node_.output(static_cast<int>(i))); }

const std::string& NodeContext::Out(size_t i) {
  KILN_CHECK(HasOutput(i), "Out(", i, ") of a node without that output");
  if (out_vars_[i].empty()) out_vars_[i] = ic_.NewVarName(node_.output(static_cast<int>(i)));
  return out_vars_[i];
}

void NodeContext::Alias(size_t i, const std::string& var) { aliases_[i] = var; }

void NodeContext::SetConstant(size_t i, Tensor value) { constants_[i] = std::make_shared<const Tensor>(std::move(value)); }

void NodeContext::Commit() {
  for (size_t i = 0; i < OutputCount(); ++i) {
    if (!HasOutput(i)) continue;
    const std::string& name = node_.output(static_cast<int>(i));
    if (auto c = constants_.find(i); c != constants_.end()) {
      ic_.SetValue(name, Value{Value::Kind::kConstant, "", c->second, c->second->dims(), c->second->dtype()});
      continue;
    }
    std::string var = aliases_.count(i) ? aliases_[i] : out_vars_[i];
    const proto::VarDesc* desc = var.empty() ? nullptr : ic_.FindVar(var);
    if (desc == nullptr) {
      if (OutputUsed(i)) RefuseWith(ErrorCode::kInternal, StrCat("the converter computed no output ", i));
      continue;
    }
    ic_.SetValue(name, Value{Value::Kind::kRuntime, var, nullptr, kiln::VarDims(*desc), FromProto(desc->dtype())});
  }
}

std::string NodeContext::ConstantVar(const std::string& hint, const Tensor& value) {
  try {
    return ic_.NewConstantVar(TempHint(hint), value);
  } catch (const OnnxImportError&) {
    throw;
  } catch (const Error& e) {
    RefuseWith(e.code(), e.what());
  }
}

std::string NodeContext::TempHint(const std::string& hint) const {
  return (HasOutput(0) ? node_.output(0) : node_.name()) + "." + hint;
}

std::string NodeContext::Temp(const std::string& hint) { return ic_.NewVarName(TempHint(hint)); }

void NodeContext::Op(const std::string& type, const SlotArgsList& inputs, const SlotArgsList& outputs,
                     const AttrMap& attrs) {
  OpBuilder b(type);
  for (const auto& [slot, args] : inputs) b.In(slot, args);
  for (const auto& [slot, args] : outputs) b.Out(slot, args);
  for (const auto& [name, value] : attrs) b.Attr(name, value);
  try {
    ic_.Emit(b.Build());
  } catch (const Error& e) {
    Refuse("kiln's ", type, " op does not accept it: ", e.what());
  }
}

std::string NodeContext::Op1(const std::string& type, const SlotArgsList& inputs, const AttrMap& attrs,
                             const std::string& out, const std::string& out_slot) {
  const std::string var = out.empty() ? Temp(type) : out;
  Op(type, inputs, {{out_slot, {var}}}, attrs);
  return var;
}

Dims NodeContext::VarDims(const std::string& var) const {
  const proto::VarDesc* d = ic_.FindVar(var);
  KILN_CHECK(d != nullptr, "no var '", var, "'");
  return kiln::VarDims(*d);
}

DataType NodeContext::VarDtype(const std::string& var) const {
  const proto::VarDesc* d = ic_.FindVar(var);
  KILN_CHECK(d != nullptr, "no var '", var, "'");
  return FromProto(d->dtype());
}

OnnxRefusal NodeContext::Refusal(const std::string& reason) const {
  return OnnxRefusal{index_, node_.name(), node_.op_type(), ic_.opset(), reason, ""};
}

void NodeContext::Throw(ErrorCode code, OnnxRefusal refusal) const {
  std::string label = "node " + std::to_string(index_);
  label += node_.name().empty() ? " (unnamed" + (HasOutput(0) ? ", output '" + node_.output(0) + "')" : ")")
                                : " '" + node_.name() + "'";
  const std::string message =
      StrCat(ic_.source(), ": ", label, " (", node_.op_type(), ", opset ", ic_.opset(), "): ", refusal.reason);
  throw OnnxImportError(code, message, std::move(refusal));
}

void NodeContext::RefuseWith(ErrorCode code, const std::string& reason) const { Throw(code, Refusal(reason)); }

}  // namespace kiln::onnx_import
