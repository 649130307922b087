#include "compiler/codegen/ew_runtime_kernel.h"

#include <algorithm>
#include <vector>

namespace kiln::jit {
namespace {

class EwRuntimeKernel final : public runtime::Kernel {
 public:
  EwRuntimeKernel(std::shared_ptr<jit::FusedElementwiseKernel> k, std::string describe, EwLayoutOf layout_of)
      : kernel_(std::move(k)), describe_(std::move(describe)), layout_of_(std::move(layout_of)) {}
  const std::string& name() const override { return kernel_->name(); }
  std::string Describe() const override { return describe_; }
  void Run(const runtime::BufferView* args) const override {
    const int n_in = static_cast<int>(kernel_->layout().inputs.size());
    const int n_out = static_cast<int>(kernel_->layout().outputs.size());
    const void* in[kMaxEwOperands];
    void* out[kMaxEwOperands];
    KILN_CHECK(n_in <= static_cast<int>(kMaxEwOperands) && n_out <= static_cast<int>(kMaxEwOperands),
               "ew kernel with more than ", kMaxEwOperands, " operands");
    for (int i = 0; i < n_in; ++i) in[i] = args[i].data;
    for (int o = 0; o < n_out; ++o) out[o] = args[n_in + o].data;
    kernel_->Run(in, out);
  }
  const uint8_t* code() const override { return kernel_->code(); }
  size_t code_size() const override { return kernel_->code_size(); }
  std::vector<std::string> fused_ops() const override { return kernel_->fused_ops(); }
  std::string DumpDetail() const override { return kernel_->ToString(); }
  std::vector<std::pair<int, int>> InplacePairs() const override;
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override;

 private:
  std::shared_ptr<jit::FusedElementwiseKernel> kernel_;
  std::string describe_;
  EwLayoutOf layout_of_;
};

std::shared_ptr<const runtime::Kernel> EwRuntimeKernel::Resize(const std::vector<Dims>& dims,
                                                               std::string* why) const {
  if (!layout_of_) return runtime::Kernel::Resize(dims, why);
  const EwLayout& old = kernel_->layout();
  auto fail = [&](const std::string& reason) -> std::shared_ptr<const runtime::Kernel> {
    if (why != nullptr) *why = name() + ": " + reason;
    return nullptr;
  };
  if (dims.size() != old.inputs.size() + old.outputs.size()) {
    return fail("got dims of " + std::to_string(dims.size()) + " args, the kernel has " +
                std::to_string(old.inputs.size() + old.outputs.size()));
  }
  std::string reason;
  std::optional<EwLayout> layout = layout_of_(dims, &reason);
  if (!layout) return fail(reason);
  if (layout->inputs.size() != old.inputs.size() || layout->outputs.size() != old.outputs.size()) {
    return fail("the new layout has other operand counts");
  }
  for (size_t k = 0; k < old.inputs.size(); ++k) layout->inputs[k].elem = old.inputs[k].elem;
  for (size_t k = 0; k < old.outputs.size(); ++k) layout->outputs[k].elem = old.outputs[k].elem;
  // The line shows the layout it runs over.
  std::string describe = describe_;
  const std::string was = old.ToString(), now = layout->ToString();
  const size_t at = describe.find(was);
  if (at != std::string::npos) {
    describe.replace(at, was.size(), now);
  } else {
    describe += " (resized to " + now + ")";
  }
  std::shared_ptr<jit::FusedElementwiseKernel> k = kernel_->Resized(std::move(*layout), why);
  if (k == nullptr) return nullptr;
  return std::make_shared<EwRuntimeKernel>(std::move(k), std::move(describe), layout_of_);
}

// Output j over input k: same strides and element type, neither broadcast nor reduced, and
// every load of k comes before the first store to j in the program.
std::vector<std::pair<int, int>> EwRuntimeKernel::InplacePairs() const {
  const EwLayout& l = kernel_->layout();
  auto full = [&l](const EwOperand& op) {
    for (int d = 0; d < l.rank; ++d) {
      if (l.dims[d] > 1 && op.strides[d] == 0) return false;
    }
    return true;
  };
  const auto& instrs = kernel_->program().instrs();
  // One pass over the program: each input's last load, each output's first
  // store (the program's length when there is none).
  const int n = static_cast<int>(instrs.size());
  std::vector<int> last_load(l.inputs.size(), -1), first_store(l.outputs.size(), n);
  for (int i = 0; i < n; ++i) {
    const int operand = instrs[i].operand;
    if (instrs[i].op == EwOp::kLoad && operand >= 0 && operand < static_cast<int>(last_load.size())) {
      last_load[operand] = i;
    }
    if (instrs[i].op == EwOp::kStore && operand >= 0 && operand < static_cast<int>(first_store.size())) {
      first_store[operand] = std::min(first_store[operand], i);
    }
  }
  std::vector<std::pair<int, int>> pairs;
  for (int k = 0; k < static_cast<int>(l.inputs.size()); ++k) {
    if (!full(l.inputs[k])) continue;
    for (int j = 0; j < static_cast<int>(l.outputs.size()); ++j) {
      if (!full(l.outputs[j]) || l.outputs[j].strides != l.inputs[k].strides ||
          l.outputs[j].elem != l.inputs[k].elem) {
        continue;
      }
      if (last_load[k] < first_store[j]) pairs.emplace_back(k, j);
    }
  }
  return pairs;
}

}  // namespace

std::shared_ptr<const runtime::Kernel> MakeEwRuntimeKernel(std::shared_ptr<jit::FusedElementwiseKernel> kernel,
                                                           std::string describe, EwLayoutOf layout_of) {
  return std::make_shared<EwRuntimeKernel>(std::move(kernel), std::move(describe), std::move(layout_of));
}

EwLayoutOf FlatLayoutOf(std::vector<bool> scalar_inputs) {
  return [scalar_inputs = std::move(scalar_inputs)](const std::vector<Dims>& arg_dims,
                                                    std::string* why) -> std::optional<EwLayout> {
    const size_t n_in = scalar_inputs.size();
    EwLayout layout;
    int64_t n = -1;
    for (size_t k = 0; k < arg_dims.size(); ++k) {
      const int64_t numel = Numel(arg_dims[k]);
      const bool scalar = k < n_in && scalar_inputs[k];
      std::string bad;
      if (scalar && numel != 1) bad = "must hold one element";
      if (!scalar && n >= 0 && numel != n) bad = "has " + std::to_string(numel) + " elements, not " + std::to_string(n);
      if (!bad.empty()) {
        if (why != nullptr) *why = "arg " + std::to_string(k) + " " + DimsToString(arg_dims[k]) + " " + bad;
        return std::nullopt;
      }
      if (!scalar) n = numel;
      EwOperand op;
      op.strides[0] = scalar ? 0 : 1;
      (k < n_in ? layout.inputs : layout.outputs).push_back(op);
    }
    layout.dims[0] = n < 0 ? 1 : n;
    return layout;
  };
}

}  // namespace kiln::jit
