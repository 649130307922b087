#include "framework/operator.h"

#include <algorithm>
#include <set>

namespace kiln {

const char* JitLoweringName(JitLowering j) {
  switch (j) {
    case JitLowering::kNone: return "none";
    case JitLowering::kElementwise: return "elementwise";
    case JitLowering::kOneDnn: return "onednn";
    case JitLowering::kReduction: return "reduction";
    case JitLowering::kOptimizer: return "optimizer";
    case JitLowering::kLayout: return "layout";
    case JitLowering::kFramework: return "framework";
  }
  return "?";
}

const SlotDef* OpInfo::FindInput(std::string_view slot) const {
  for (const auto& s : inputs) {
    if (s.name == slot) return &s;
  }
  return nullptr;
}
const SlotDef* OpInfo::FindOutput(std::string_view slot) const {
  for (const auto& s : outputs) {
    if (s.name == slot) return &s;
  }
  return nullptr;
}
const AttrDef* OpInfo::FindAttr(std::string_view name) const {
  for (const auto& a : attrs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// ---- ExecContext ---------------------------------------------------------------

const SlotVars* ExecContext::FindSlot(const std::vector<SlotVars>& slots, std::string_view slot) const {
  for (const auto& s : slots) {
    if (s.name == slot) return &s;
  }
  return nullptr;
}

size_t ExecContext::InputCount(std::string_view slot) const {
  const SlotVars* s = FindSlot(inputs_, slot);
  return s ? s->vars.size() : 0;
}

Variable* ExecContext::InputVar(std::string_view slot, size_t i) const {
  const SlotVars* s = FindSlot(inputs_, slot);
  return s == nullptr || i >= s->vars.size() ? nullptr : s->vars[i];
}

const Tensor* ExecContext::InputTensor(std::string_view slot, size_t i) const {
  const Variable* v = InputVar(slot, i);
  return v == nullptr ? nullptr : &v->Get();
}

const Tensor* ExecContext::InputOrNull(std::string_view slot, size_t i) const {
  const Tensor* tp = InputTensor(slot, i);
  if (tp == nullptr) return nullptr;
  const Tensor& t = *tp;
  return t.initialized() ? &t : nullptr;
}

const Tensor& ExecContext::Input(std::string_view slot, size_t i) const {
  const SlotVars* s = FindSlot(inputs_, slot);
  if (s == nullptr || i >= s->vars.size() || s->vars[i] == nullptr) {
    Fail("input ", slot, "[", i, "] is missing");
  }
  const Tensor& t = s->vars[i]->Get();
  if (t.shape_only()) {
    Fail("input ", slot, " ('", s->args[i], "') is shape-only: its buffer was released because only ops reading its ",
         "dims were expected to follow, but this kernel reads its data (a missing no_need_buffer entry?)");
  }
  if (!t.initialized()) Fail("input ", slot, " ('", s->args[i], "') holds no data: it is read before any op writes it and was not fed (a parameter: run its startup program or load a checkpoint first)");
  return t;
}

const Tensor* ExecContext::InputMetaOrNull(std::string_view slot, size_t i) const {
  const Tensor* tp = InputTensor(slot, i);
  if (tp == nullptr) return nullptr;
  const Tensor& t = *tp;
  return t.has_shape() ? &t : nullptr;
}

const Tensor& ExecContext::InputMeta(std::string_view slot, size_t i) const {
  const SlotVars* s = FindSlot(inputs_, slot);
  if (s == nullptr || i >= s->vars.size() || s->vars[i] == nullptr) {
    Fail("input ", slot, "[", i, "] is missing");
  }
  const Tensor& t = s->vars[i]->Get();
  if (!t.has_shape()) Fail("input ", slot, " ('", s->args[i], "') holds no data: it is read before any op writes it and was not fed (a parameter: run its startup program or load a checkpoint first)");
  return t;
}

std::vector<const Tensor*> ExecContext::MultiInput(std::string_view slot) const {
  std::vector<const Tensor*> out;
  for (size_t i = 0; i < InputCount(slot); ++i) out.push_back(InputOrNull(slot, i));
  return out;
}

const std::string& ExecContext::InputName(std::string_view slot, size_t i) const {
  const SlotVars* s = FindSlot(inputs_, slot);
  if (s == nullptr || i >= s->args.size()) Fail("input ", slot, "[", i, "] is missing");
  return s->args[i];
}

size_t ExecContext::OutputCount(std::string_view slot) const {
  const SlotVars* s = FindSlot(outputs_, slot);
  return s ? s->vars.size() : 0;
}

Tensor* ExecContext::OutputOrNull(std::string_view slot, size_t i) const {
  const SlotVars* s = FindSlot(outputs_, slot);
  if (s == nullptr || i >= s->vars.size() || s->vars[i] == nullptr) return nullptr;
  return s->vars[i]->GetMutable();
}

Tensor* ExecContext::Output(std::string_view slot, size_t i) const {
  Tensor* t = OutputOrNull(slot, i);
  if (t == nullptr) Fail("output ", slot, "[", i, "] is missing");
  return t;
}

const std::string& ExecContext::OutputName(std::string_view slot, size_t i) const {
  const SlotVars* s = FindSlot(outputs_, slot);
  if (s == nullptr || i >= s->args.size()) Fail("output ", slot, "[", i, "] is missing");
  return s->args[i];
}

const Attribute& LookupAttr(const AttrMap& attrs, const std::string& name, const std::string& op_name) {
  auto it = attrs.find(name);
  if (it == attrs.end()) ThrowInvalidArgument(op_name, ": attribute '", name, "' is not set");
  return it->second;
}

// ---- Grad ops --------------------------------------------------------------------

proto::OpDesc MakeGradOp(const proto::OpDesc& fwd, const std::vector<std::string>& fwd_inputs,
                         const std::vector<std::string>& fwd_outputs, const std::vector<std::string>& out_grads,
                         const std::vector<std::string>& in_grads) {
  proto::OpDesc g;
  g.set_type(fwd.type() + "_grad");
  for (const auto& slot : fwd_inputs) SetInput(&g, slot, InputArgs(fwd, slot));
  for (const auto& slot : fwd_outputs) SetInput(&g, slot, OutputArgs(fwd, slot));
  for (const auto& slot : out_grads) {
    std::vector<std::string> args;
    for (const auto& a : OutputArgs(fwd, slot)) args.push_back(GradVarName(a));
    SetInput(&g, GradVarName(slot), args);
  }
  for (const auto& slot : in_grads) {
    std::vector<std::string> args;
    for (const auto& a : InputArgs(fwd, slot)) args.push_back(GradVarName(a));
    SetOutput(&g, GradVarName(slot), args);
  }
  *g.mutable_attrs() = fwd.attrs();
  return g;
}

// ---- Validation of one op against its entry ----------------------------------------

std::set<std::string> NoNeedBufferVars(const OpInfo& info, const proto::OpDesc& op) {
  std::set<std::string> shape_only, data;
  if (info.no_need_buffer_vars) {
    for (auto& v : info.no_need_buffer_vars(op)) shape_only.insert(std::move(v));
  }
  for (const auto& s : op.inputs()) {
    const bool no_need = std::find(info.no_need_buffer.begin(), info.no_need_buffer.end(), s.name()) !=
                         info.no_need_buffer.end();
    for (const auto& a : s.args()) {
      if (a == kEmptyVarName) continue;
      if (no_need) {
        shape_only.insert(a);
      } else if (!info.no_need_buffer_vars) {
        data.insert(a);
      }
    }
  }
  for (const auto& s : op.outputs()) data.insert(s.args().begin(), s.args().end());
  for (const auto& a : data) shape_only.erase(a);
  return shape_only;
}

void CheckSlots(const OpInfo& info, const proto::OpDesc& op, int op_index) {
  const std::string label = OpLabel(op, op_index);
  std::set<std::string> seen;
  for (const auto& s : op.inputs()) {
    const SlotDef* def = info.FindInput(s.name());
    if (def == nullptr) ThrowInvalidArgument(label, ": unknown input slot '", s.name(), "'");
    if (!seen.insert("in:" + s.name()).second) ThrowInvalidArgument(label, ": input slot '", s.name(), "' given twice");
    if (!def->duplicable && s.args_size() > 1) {
      ThrowInvalidArgument(label, ": input slot '", s.name(), "' takes one argument, got ", s.args_size());
    }
  }
  for (const auto& s : op.outputs()) {
    const SlotDef* def = info.FindOutput(s.name());
    if (def == nullptr) ThrowInvalidArgument(label, ": unknown output slot '", s.name(), "'");
    if (!seen.insert("out:" + s.name()).second) ThrowInvalidArgument(label, ": output slot '", s.name(), "' given twice");
    if (!def->duplicable && s.args_size() > 1) {
      ThrowInvalidArgument(label, ": output slot '", s.name(), "' takes one argument, got ", s.args_size());
    }
  }
  for (const auto& def : info.inputs) {
    if (!def.dispensable && InputArgs(op, def.name).empty()) {
      ThrowInvalidArgument(label, ": missing input slot '", def.name, "'");
    }
  }
  for (const auto& def : info.outputs) {
    if (!def.dispensable && OutputArgs(op, def.name).empty()) {
      ThrowInvalidArgument(label, ": missing output slot '", def.name, "'");
    }
  }
}

bool HasOpRole(const proto::OpDesc& op, std::string_view role) {
  const proto::AttrDesc* a = FindAttr(op, kOpRoleAttr);
  return a != nullptr && a->type() == proto::AttrDesc::STRING && a->s() == role;
}

AttrMap ResolveAttrs(const OpInfo& info, const proto::OpDesc& op, int op_index) {
  AttrMap attrs;
  for (const auto& a : op.attrs()) {
    if (a.name() == kOpRoleAttr) {
      // Common to every op type (operator.h); not part of the op's own attrs.
      const AttrKind kind = KindOf(AttrFromProto(a));
      if (kind != AttrKind::kString) {
        ThrowInvalidArgument(OpLabel(op, op_index), ": attribute '", kOpRoleAttr, "' expected type ",
                             AttrKindName(AttrKind::kString), ", got ", AttrKindName(kind));
      }
      continue;
    }
    const AttrDef* def = info.FindAttr(a.name());
    if (def == nullptr) {
      ThrowInvalidArgument(OpLabel(op, op_index), ": unknown attribute '", a.name(), "'");
    }
    Attribute value = AttrFromProto(a);
    if (KindOf(value) != def->kind) {
      ThrowInvalidArgument(OpLabel(op, op_index), ": attribute '", a.name(), "' expected type ",
                           AttrKindName(def->kind), ", got ", AttrKindName(KindOf(value)));
    }
    attrs[a.name()] = std::move(value);
  }
  for (const auto& def : info.attrs) {
    if (attrs.count(def.name)) continue;
    if (!def.default_value) ThrowInvalidArgument(OpLabel(op, op_index), ": missing required attribute '", def.name, "'");
    attrs[def.name] = *def.default_value;
  }
  return attrs;
}

// ---- Run-time shape inference -------------------------------------------------------

namespace {

class RuntimeInferShapeContext final : public InferShapeContext {
 public:
  explicit RuntimeInferShapeContext(ExecContext& ctx) : ctx_(ctx) {}
  bool IsRuntime() const override { return true; }
  std::string OpName() const override { return ctx_.OpName(); }
  size_t InputCount(std::string_view slot) const override { return ctx_.InputCount(slot); }
  bool HasInput(std::string_view slot, size_t i) const override { return ctx_.InputMetaOrNull(slot, i) != nullptr; }
  Dims InputDims(std::string_view slot, size_t i) const override { return ctx_.InputMeta(slot, i).dims(); }
  DataType InputDtype(std::string_view slot, size_t i) const override { return ctx_.InputMeta(slot, i).dtype(); }
  size_t OutputCount(std::string_view slot) const override { return ctx_.OutputCount(slot); }
  bool HasOutput(std::string_view slot, size_t i) const override { return ctx_.OutputOrNull(slot, i) != nullptr; }
  void SetOutputDims(std::string_view slot, size_t i, const Dims& dims) override {
    if (Tensor* t = ctx_.OutputOrNull(slot, i)) t->Resize(dims);
  }
  void SetOutputDtype(std::string_view slot, size_t i, DataType dtype) override {
    if (Tensor* t = ctx_.OutputOrNull(slot, i)) t->set_dtype(dtype);
  }
  const AttrMap& attrs() const override { return ctx_.attrs(); }

 private:
  ExecContext& ctx_;
};

}  // namespace

void RunInferShape(const OpInfo& info, ExecContext& ctx) {
  if (!info.infer_shape) return;
  RuntimeInferShapeContext isc(ctx);
  info.infer_shape(isc);
}

}  // namespace kiln
