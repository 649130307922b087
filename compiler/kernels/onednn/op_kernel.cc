#include "compiler/kernels/onednn/op_kernel.h"

namespace kiln::jit {

FrameworkOpKernel::FrameworkOpKernel(const proto::OpDesc& op, const OpInfo& info, bool use_onednn,
                                     const onednn::Settings& onednn, std::vector<std::string>* arg_names,
                                     int* num_inputs)
    : name_(op.type()),
      op_(op),
      info_(&info),
      attrs_(ResolveAttrs(info, op, 0)),
      use_onednn_(use_onednn),
      onednn_(onednn) {
  int pos = 0;
  auto layout = [&pos, this](const auto& slots, auto* out) {
    for (const auto& s : slots) {
      std::vector<int> positions;
      for (const auto& a : s.args()) {
        if (a == kEmptyVarName) {
          positions.push_back(-1);
          continue;
        }
        positions.push_back(pos++);
        names_.push_back(a);
      }
      out->emplace_back(s.name(), positions);
    }
  };
  layout(op.inputs(), &in_slots_);
  *num_inputs = pos;
  layout(op.outputs(), &out_slots_);
  *arg_names = names_;
}

std::string FrameworkOpKernel::Describe() const {
  return std::string(use_onednn_ && info_->onednn_kernel ? "framework kernel (oneDNN, reference fallback) "
                                                          : "framework kernel (reference) ") +
         op_.type();
}

void FrameworkOpKernel::Run(const runtime::BufferView* args) const {
  // Views over the bound buffers; built per call, so calls are thread-safe.
  std::vector<std::unique_ptr<Variable>> vars;
  vars.reserve(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    vars.push_back(std::make_unique<Variable>(names_[i]));
    vars.back()->GetMutable()->ShareExternalData(args[i].data, args[i].dtype, *args[i].dims);
  }
  auto bind = [&vars](const std::vector<std::pair<std::string, std::vector<int>>>& layout) {
    std::vector<SlotVars> slots;
    for (const auto& [slot, positions] : layout) {
      SlotVars sv{slot, {}, {}};
      for (int p : positions) {
        sv.vars.push_back(p < 0 ? nullptr : vars[p].get());
        sv.args.push_back(p < 0 ? kEmptyVarName : vars[p]->name());
      }
      slots.push_back(std::move(sv));
    }
    return slots;
  };
  const std::vector<SlotVars> inputs = bind(in_slots_);
  const std::vector<SlotVars> outputs = bind(out_slots_);
  ExecContext ctx(op_, attrs_, inputs, outputs, 0, onednn_);
  if (!(use_onednn_ && info_->onednn_kernel && info_->onednn_kernel(ctx))) info_->reference_kernel(ctx);
  // Zero-copy: a kernel that reallocated an output would have written elsewhere.
  for (const auto& [slot, positions] : out_slots_) {
    for (int p : positions) {
      if (p >= 0) KILN_CHECK(vars[p]->Get().raw_data() == args[p].data, op_.type(), " reallocated output ", slot);
    }
  }
}

}  // namespace kiln::jit
