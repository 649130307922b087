// Helpers over proto::OpDesc / BlockDesc: slot and attribute access, building.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "framework/attribute.h"
#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"

namespace kiln {

// Placeholder argument for a gradient that is not needed (keeps positions in
// duplicable slots).
inline constexpr const char* kEmptyVarName = "@EMPTY@";
inline constexpr const char* kGradSuffix = "@GRAD";
inline std::string GradVarName(std::string_view var) { return std::string(var) + kGradSuffix; }

// Arguments of a slot; empty when the slot is absent.
std::vector<std::string> SlotArgs(const google::protobuf::RepeatedPtrField<proto::OpDesc::Slot>& slots,
                                  std::string_view slot);
inline std::vector<std::string> InputArgs(const proto::OpDesc& op, std::string_view slot) {
  return SlotArgs(op.inputs(), slot);
}
inline std::vector<std::string> OutputArgs(const proto::OpDesc& op, std::string_view slot) {
  return SlotArgs(op.outputs(), slot);
}
// Every argument of every input (output) slot, in slot order.
std::vector<std::string> AllInputArgs(const proto::OpDesc& op);
std::vector<std::string> AllOutputArgs(const proto::OpDesc& op);
// The same without @EMPTY@ arguments: the vars the op really reads (writes).
std::vector<std::string> InputVars(const proto::OpDesc& op);
std::vector<std::string> OutputVars(const proto::OpDesc& op);

void SetInput(proto::OpDesc* op, std::string_view slot, const std::vector<std::string>& args);
void SetOutput(proto::OpDesc* op, std::string_view slot, const std::vector<std::string>& args);
void SetAttr(proto::OpDesc* op, const std::string& name, const Attribute& value);
// nullptr when absent.
const proto::AttrDesc* FindAttr(const proto::OpDesc& op, std::string_view name);

// Fluent construction: OpBuilder("matmul").In("X", {"x"}).Out("Out", {"y"}).Attr("alpha", 1.f).Build()
class OpBuilder {
 public:
  explicit OpBuilder(std::string type) { op_.set_type(std::move(type)); }
  OpBuilder& In(std::string_view slot, const std::vector<std::string>& args) {
    SetInput(&op_, slot, args);
    return *this;
  }
  OpBuilder& Out(std::string_view slot, const std::vector<std::string>& args) {
    SetOutput(&op_, slot, args);
    return *this;
  }
  OpBuilder& Attr(const std::string& name, const Attribute& value) {
    SetAttr(&op_, name, value);
    return *this;
  }
  proto::OpDesc Build() const { return op_; }

 private:
  proto::OpDesc op_;
};

// Block helpers.
const proto::VarDesc* FindVarDesc(const proto::BlockDesc& block, std::string_view name);
// The var `name` of `block`; throws NotFound "<role> '<name>': the program
// declares no such variable; did you mean 'x'?" (role: "feed", "fetch", ...).
const proto::VarDesc& RequireVarDesc(const proto::BlockDesc& block, std::string_view name, std::string_view role);
proto::VarDesc* FindMutableVarDesc(proto::BlockDesc* block, std::string_view name);
Dims VarDims(const proto::VarDesc& var);
// "op #3 'matmul'": how errors name an op.
std::string OpLabel(const proto::OpDesc& op, int index);

}  // namespace kiln
