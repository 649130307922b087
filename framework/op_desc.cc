#include "framework/op_desc.h"
#include "framework/suggest.h"

#include <algorithm>

namespace kiln {

std::vector<std::string> SlotArgs(const google::protobuf::RepeatedPtrField<proto::OpDesc::Slot>& slots,
                                  std::string_view slot) {
  for (const auto& s : slots) {
    if (s.name() == slot) return {s.args().begin(), s.args().end()};
  }
  return {};
}

static std::vector<std::string> AllArgs(const google::protobuf::RepeatedPtrField<proto::OpDesc::Slot>& slots) {
  std::vector<std::string> out;
  for (const auto& s : slots) out.insert(out.end(), s.args().begin(), s.args().end());
  return out;
}
std::vector<std::string> AllInputArgs(const proto::OpDesc& op) { return AllArgs(op.inputs()); }
std::vector<std::string> AllOutputArgs(const proto::OpDesc& op) { return AllArgs(op.outputs()); }

static std::vector<std::string> WithoutEmpty(std::vector<std::string> args) {
  args.erase(std::remove(args.begin(), args.end(), std::string(kEmptyVarName)), args.end());
  return args;
}
std::vector<std::string> InputVars(const proto::OpDesc& op) { return WithoutEmpty(AllInputArgs(op)); }
std::vector<std::string> OutputVars(const proto::OpDesc& op) { return WithoutEmpty(AllOutputArgs(op)); }

static void SetSlot(google::protobuf::RepeatedPtrField<proto::OpDesc::Slot>* slots, std::string_view slot,
                    const std::vector<std::string>& args) {
  proto::OpDesc::Slot* target = nullptr;
  for (auto& s : *slots) {
    if (s.name() == slot) target = &s;
  }
  if (target == nullptr) {
    target = slots->Add();
    target->set_name(std::string(slot));
  }
  target->clear_args();
  for (const auto& a : args) target->add_args(a);
}
void SetInput(proto::OpDesc* op, std::string_view slot, const std::vector<std::string>& args) {
  SetSlot(op->mutable_inputs(), slot, args);
}
void SetOutput(proto::OpDesc* op, std::string_view slot, const std::vector<std::string>& args) {
  SetSlot(op->mutable_outputs(), slot, args);
}

void SetAttr(proto::OpDesc* op, const std::string& name, const Attribute& value) {
  for (auto& a : *op->mutable_attrs()) {
    if (a.name() == name) {
      a = AttrToProto(name, value);
      return;
    }
  }
  *op->add_attrs() = AttrToProto(name, value);
}

const proto::AttrDesc* FindAttr(const proto::OpDesc& op, std::string_view name) {
  for (const auto& a : op.attrs()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

const proto::VarDesc* FindVarDesc(const proto::BlockDesc& block, std::string_view name) {
  for (const auto& v : block.vars()) {
    if (v.name() == name) return &v;
  }
  return nullptr;
}

proto::VarDesc* FindMutableVarDesc(proto::BlockDesc* block, std::string_view name) {
  for (auto& v : *block->mutable_vars()) {
    if (v.name() == name) return &v;
  }
  return nullptr;
}

const proto::VarDesc& RequireVarDesc(const proto::BlockDesc& block, std::string_view name, std::string_view role) {
  if (const proto::VarDesc* v = FindVarDesc(block, name)) return *v;
  std::vector<std::string> names;
  for (const auto& v : block.vars()) names.push_back(v.name());
  ThrowNotFound(role, " '", name, "': the program declares no such variable", DidYouMean(name, names));
}

Dims VarDims(const proto::VarDesc& var) { return Dims(var.dims().begin(), var.dims().end()); }

std::string OpLabel(const proto::OpDesc& op, int index) {
  return "op #" + std::to_string(index) + " '" + op.type() + "'";
}

}  // namespace kiln
