#include "compiler/lowering/units/blocked_residual.h"

#include <utility>

#include "compiler/kernels/blocked_residual.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "framework/error.h"

namespace kiln::jit {
namespace {

class ResidualKernel final : public runtime::Kernel {
 public:
  ResidualKernel(std::string name, const Dims& dims, ActLayout layout, bool grad, bool want_ds)
      : name_(std::move(name)), dims_(dims), layout_(layout), grad_(grad), want_ds_(want_ds) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return grad_ ? std::string("kiln relu and residual-sum gradient, da written in ") + ActLayoutName(layout_) +
                       (want_ds_ ? ", the shortcut's plain" : "")
                 : std::string("kiln residual sum + relu reading the batch norm's output in ") +
                       ActLayoutName(layout_) + ", writing plain NCHW";
  }
  // The loops take N, C, H * W as arguments: the same kernel for a new
  // N, H, W (the channels stay).
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    // The forward's a is kept; the backward's Out is plain.
    Dims x;
    if (!dims.empty()) x = KeptLogicalDims(grad_ ? ActLayout::kPlain : layout_, dims[0], dims_[1]);
    std::string bad;
    if (x.empty() || Numel(x) <= 0) {
      bad = StrCat(grad_ ? "Out" : "a", " must be an [N, ", dims_[1], ", H, W] activation",
                   grad_ ? std::string() : std::string(" in ") + ActLayoutName(layout_), " without a zero dim, got ",
                   dims.empty() ? std::string("none") : DimsToString(dims[0]));
    } else {
      const Dims kept = ActStoredDims(layout_, x);
      std::vector<Dims> want = grad_ ? std::vector<Dims>{x, x, kept} : std::vector<Dims>{kept, x, x};
      if (grad_ && want_ds_) want.push_back(x);
      if (dims != want) {
        bad = StrCat("expected ", want.size(), " arguments of dims");
        for (const Dims& d : want) bad += " " + DimsToString(d);
        bad += ", got";
        for (const Dims& d : dims) bad += " " + DimsToString(d);
      }
    }
    if (!bad.empty()) {
      if (why != nullptr) *why = name_ + ": " + bad;
      return nullptr;
    }
    return std::make_shared<ResidualKernel>(name_, x, layout_, grad_, want_ds_);
  }
  // Element i of the plain output depends on element i of the plain input
  // alone, read first (compiler/kernels/blocked_residual.cc): Out may take
  // s's memory, ds dOut's, when they die here.
  std::vector<std::pair<int, int>> InplacePairs() const override {
    if (!grad_) return {{1, 0}};
    if (want_ds_) return {{1, 1}};
    return {};
  }
  // args: a (kept), s, Out; or Out, dOut, da (kept)[, ds].
  void Run(const runtime::BufferView* args) const override {
    const int64_t n = dims_[0], c = dims_[1], hw = dims_[2] * dims_[3], b = ActChannelGroup(layout_, c);
    if (!grad_) {
      ResidualAddReluBlocked(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data),
                             static_cast<float*>(args[2].data), n, c, hw, b);
      return;
    }
    ResidualAddReluGradBlocked(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data),
                               static_cast<float*>(args[2].data),
                               want_ds_ ? static_cast<float*>(args[3].data) : nullptr, n, c, hw, b);
  }

 private:
  std::string name_;
  Dims dims_;
  ActLayout layout_;
  bool grad_, want_ds_;
};

std::set<std::string> Written(const BlockedResidualGradUnit::Operands& o) {
  std::set<std::string> w = {o.da.Name()};
  if (!o.ds.empty()) w.insert(o.ds);
  return w;
}

}  // namespace

BlockedResidualUnit::BlockedResidualUnit(const std::string& step, std::vector<int> ops, Operands operands)
    : Unit(step, std::move(ops), {operands.a.Name(), operands.s}, {operands.out}), o_(std::move(operands)) {
  KILN_CHECK(o_.a.kind == DerivedKind::kKeptLayout && o_.dims.size() == 4);
}

std::string BlockedResidualUnit::Describe(const Cluster&) const {
  return "kiln residual sum + relu kernel reading " + o_.a.Name() + " and " + o_.s + ", writing " + o_.out + " plain";
}

std::vector<EmittedKernel> BlockedResidualUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<ResidualKernel>(ctx.KernelName("residual"), o_.dims, o_.a.layout, false, false);
  k.args = {o_.a.Name(), o_.s, o_.out};
  k.num_inputs = 2;
  return {k};
}

BlockedResidualGradUnit::BlockedResidualGradUnit(const std::string& step, std::vector<int> ops, Operands operands)
    : Unit(step, std::move(ops), {operands.out, operands.dout}, Written(operands)), o_(std::move(operands)) {
  KILN_CHECK(o_.da.kind == DerivedKind::kKeptLayout && o_.dims.size() == 4);
}

std::string BlockedResidualGradUnit::Describe(const Cluster&) const {
  return "kiln relu and residual-sum gradient kernel: " + o_.da.Name() + (o_.ds.empty() ? "" : " and " + o_.ds) +
         " from " + o_.dout;
}

std::vector<EmittedKernel> BlockedResidualGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<ResidualKernel>(ctx.KernelName("residual_grad"), o_.dims, o_.da.layout, true,
                                              !o_.ds.empty());
  k.args = {o_.out, o_.dout, o_.da.Name()};
  if (!o_.ds.empty()) k.args.push_back(o_.ds);
  k.num_inputs = 2;
  k.new_vars.push_back(o_.da.Desc(ctx.cluster()));
  return {k};
}

}  // namespace kiln::jit
