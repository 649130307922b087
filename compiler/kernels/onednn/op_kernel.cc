#include "compiler/kernels/onednn/op_kernel.h"

#include <algorithm>
#include <optional>

#include "framework/onednn/onednn_kernels.h"

namespace kiln::jit {
namespace {

using SlotLayout = std::vector<std::pair<std::string, std::vector<int>>>;

// Shape inference over bound views: the inputs' dims and dtypes, the outputs'
// inferred dims recorded by argument position.
class ViewInferShapeContext final : public InferShapeContext {
 public:
  ViewInferShapeContext(const std::string& op, const AttrMap& attrs, const SlotLayout& in, const SlotLayout& out,
                        const runtime::BufferView* args, size_t num_args)
      : op_(op), attrs_(attrs), in_(in), out_(out), args_(args), inferred_(num_args) {}
  bool IsRuntime() const override { return true; }
  std::string OpName() const override { return op_; }
  size_t InputCount(std::string_view slot) const override { return Positions(in_, slot).size(); }
  bool HasInput(std::string_view slot, size_t i) const override { return Position(in_, slot, i) >= 0; }
  Dims InputDims(std::string_view slot, size_t i) const override { return *args_[Input(slot, i)].dims; }
  DataType InputDtype(std::string_view slot, size_t i) const override { return args_[Input(slot, i)].dtype; }
  size_t OutputCount(std::string_view slot) const override { return Positions(out_, slot).size(); }
  bool HasOutput(std::string_view slot, size_t i) const override { return Position(out_, slot, i) >= 0; }
  void SetOutputDims(std::string_view slot, size_t i, const Dims& dims) override {
    const int p = Position(out_, slot, i);
    if (p >= 0) inferred_[p] = dims;
  }
  void SetOutputDtype(std::string_view, size_t, DataType) override {}
  const AttrMap& attrs() const override { return attrs_; }
  // The dims inferred for argument p (an output), if any.
  const std::optional<Dims>& inferred(int p) const { return inferred_[p]; }

 private:
  static const std::vector<int>& Positions(const SlotLayout& layout, std::string_view slot) {
    static const std::vector<int> kNone;
    for (const auto& [name, positions] : layout) {
      if (name == slot) return positions;
    }
    return kNone;
  }
  static int Position(const SlotLayout& layout, std::string_view slot, size_t i) {
    const std::vector<int>& p = Positions(layout, slot);
    return i < p.size() ? p[i] : -1;
  }
  int Input(std::string_view slot, size_t i) const {
    const int p = Position(in_, slot, i);
    if (p < 0) Fail("input ", slot, "[", i, "] is missing");
    return p;
  }

  const std::string& op_;
  const AttrMap& attrs_;
  const SlotLayout &in_, &out_;
  const runtime::BufferView* args_;
  std::vector<std::optional<Dims>> inferred_;
};

}  // namespace

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
  FindInplacePair(info, *num_inputs);
}

// The op's in-place pair when its kernel computes Out over X's memory one
// element from the same element (the in-place pass's kernels but softmax,
// whose elements depend on their row) and reads X's var once.
void FrameworkOpKernel::FindInplacePair(const OpInfo& info, int num_inputs) {
  const std::vector<std::string>& kernels = OneDnnInplaceOps();
  if (name_ == "softmax" || !std::binary_search(kernels.begin(), kernels.end(), name_)) return;
  auto first = [](const auto& slots, const std::string& slot) {
    for (const auto& [name, positions] : slots) {
      if (name == slot && !positions.empty()) return positions.front();
    }
    return -1;
  };
  for (const auto& [in_slot, out_slot] : info.inplace) {
    const int k = first(in_slots_, in_slot), j = first(out_slots_, out_slot);
    if (k < 0 || j < 0) continue;
    if (std::count(names_.begin(), names_.begin() + num_inputs, names_[k]) == 1) inplace_.emplace_back(k, j - num_inputs);
    return;
  }
}

std::string FrameworkOpKernel::Describe() const {
  return std::string(use_onednn_ && info_->onednn_kernel ? "framework kernel (oneDNN, reference fallback) "
                                                          : "framework kernel (reference) ") +
         op_.type();
}

std::shared_ptr<const runtime::Kernel> FrameworkOpKernel::Resize(const std::vector<Dims>& dims,
                                                                 std::string* why) const {
  if (dims.size() != names_.size()) {
    if (why != nullptr) *why = StrCat(name_, ": expected dims for ", names_.size(), " arguments, got ", dims.size());
    return nullptr;
  }
  return std::make_shared<FrameworkOpKernel>(*this);
}

void FrameworkOpKernel::CheckOutputDims(const runtime::BufferView* args) const {
  if (!info_->infer_shape) return;
  ViewInferShapeContext ctx(op_.type(), attrs_, in_slots_, out_slots_, args, names_.size());
  info_->infer_shape(ctx);
  for (const auto& [slot, positions] : out_slots_) {
    for (int p : positions) {
      if (p < 0 || !ctx.inferred(p)) continue;
      const Dims& want = *ctx.inferred(p);
      const bool concrete = std::all_of(want.begin(), want.end(), [](int64_t d) { return d >= 0; });
      if (concrete && want != *args[p].dims) {
        ThrowInvalidArgument(op_.type(), " output ", slot, " ('", names_[p], "'): the op makes it ",
                             DimsToString(want), " for these inputs, but the buffer bound to it is ",
                             DimsToString(*args[p].dims));
      }
    }
  }
}

void FrameworkOpKernel::Run(const runtime::BufferView* args) const {
  CheckOutputDims(args);
  RunKernel(args, onednn_, /*reference=*/true);
}

std::vector<onednn::ReorderNote> FrameworkOpKernel::Reorders(const runtime::BufferView* args) const {
  std::vector<onednn::ReorderNote> notes;
  if (!use_onednn_ || !info_->onednn_kernel) return notes;
  onednn::Settings dry = onednn_;
  dry.dry_run = &notes;
  // A oneDNN kernel that falls back has run what it ran before (listed);
  // the reference kernel runs no oneDNN primitive.
  RunKernel(args, dry, /*reference=*/false);
  return notes;
}

void FrameworkOpKernel::RunKernel(const runtime::BufferView* args, const onednn::Settings& settings,
                                  bool reference) const {
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
  ExecContext ctx(op_, attrs_, inputs, outputs, 0, settings);
  const bool ran_onednn = use_onednn_ && info_->onednn_kernel && info_->onednn_kernel(ctx);
  if (!ran_onednn && reference) info_->reference_kernel(ctx);
  // Zero-copy: a kernel that reallocated an output would have written elsewhere.
  for (const auto& [slot, positions] : out_slots_) {
    for (int p : positions) {
      if (p >= 0) KILN_CHECK(vars[p]->Get().raw_data() == args[p].data, op_.type(), " reallocated output ", slot);
    }
  }
}

}  // namespace kiln::jit
