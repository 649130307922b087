#include "compiler/lowering/units/blocked.h"

#include <utility>
#include <vector>

#include "compiler/kernels/blocked_pool.h"
#include "framework/error.h"

namespace kiln::jit {
namespace {

// Resize's guard of the blocked pooling kernels: X (dims[0]) kept in
// `layout` with the channels `made` has, H and W even (2x2 windows, stride
// 2); "" and X's new [N, C, H, W] in `x`, else what is wrong.
std::string PooledXMismatch(const Dims& made, ActLayout layout, const std::vector<Dims>& dims, Dims* x,
                            const char* arg = "X") {
  *x = dims.empty() ? Dims{} : KeptLogicalDims(layout, dims[0], made[1]);
  if (x->empty() || Numel(*x) <= 0 || (*x)[2] % 2 != 0 || (*x)[3] % 2 != 0) {
    return StrCat(arg, " must be an [N, ", made[1], ", H, W] activation in ", ActLayoutName(layout),
                  " with H and W even and no zero dim, got ", dims.empty() ? std::string("none") : DimsToString(dims[0]));
  }
  return "";
}

// "" when dims[i] == want[i] for every i (and as many), else what differs.
std::string ArgsMismatch(const std::vector<Dims>& dims, const std::vector<Dims>& want) {
  if (dims.size() != want.size()) return StrCat("expected dims for ", want.size(), " arguments, got ", dims.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (dims[i] != want[i]) return StrCat("argument ", i, " must be ", DimsToString(want[i]), ", got ", DimsToString(dims[i]));
  }
  return "";
}

std::shared_ptr<const runtime::Kernel> Refused(const std::string& name, const std::string& bad, std::string* why) {
  if (why != nullptr) *why = name + ": " + bad;
  return nullptr;
}

Dims Pooled(const Dims& x) { return {x[0], x[1], x[2] / 2, x[3] / 2}; }

class BlockedMaxPoolKernel final : public runtime::Kernel {
 public:
  BlockedMaxPoolKernel(std::string name, const Dims& x_dims, ActLayout layout)
      : name_(std::move(name)), x_(x_dims), layout_(layout), group_(ActChannelGroup(layout, x_dims[1])) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return std::string("kiln max-pool 2x2/2 from ") + ActLayoutName(layout_) + " into plain NCHW, and its argmax";
  }
  // The loops take N, H and W as arguments: the same kernel for a new X.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    Dims x;
    std::string bad = PooledXMismatch(x_, layout_, dims, &x);
    if (bad.empty()) bad = ArgsMismatch(dims, {dims[0], Pooled(x), ActStoredDims(layout_, Pooled(x))});
    if (!bad.empty()) return Refused(name_, bad, why);
    return std::make_shared<BlockedMaxPoolKernel>(name_, x, layout_);
  }
  // args: X (kept), Out, argmax.
  void Run(const runtime::BufferView* args) const override {
    MaxPool2x2BlockedToPlain(static_cast<const float*>(args[0].data), static_cast<float*>(args[1].data),
                             static_cast<uint8_t*>(args[2].data), x_[0], x_[1], x_[2], x_[3], group_);
  }

 private:
  std::string name_;
  Dims x_;
  ActLayout layout_;
  int64_t group_;
};

class BlockedMaxPoolGradKernel final : public runtime::Kernel {
 public:
  BlockedMaxPoolGradKernel(std::string name, const Dims& x_dims, ActLayout layout, PoolGradThen then, DataType out,
                           bool with_dbias, PooledGradLayout dout_layout)
      : name_(std::move(name)),
        x_(x_dims),
        layout_(layout),
        group_(ActChannelGroup(layout, x_dims[1])),
        then_(then),
        out_(out),
        with_dbias_(with_dbias),
        dout_layout_(dout_layout) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    return "kiln max-pool 2x2/2 gradient" +
           std::string(then_ == PoolGradThen::kReluGrad ? " and relu gradient" : "") + ", X and dX in " +
           ActLayoutName(layout_) + (dout_layout_ == PooledGradLayout::kGrouped ? ", dOut too" : ", dOut plain") +
           (out_ == DataType::kBF16 ? ", dX stored in bf16" : "") +
           (with_dbias_ ? ", the bias gradient summed in f32" : "") + " (routed by the forward's argmax)";
  }
  // The loops take N, H and W as arguments: the same kernel for a new X.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    Dims x;
    // dX (argument 2) is the kept activation.
    std::vector<Dims> kept_dx;
    if (dims.size() > 2) kept_dx = {dims[2]};
    std::string bad = PooledXMismatch(x_, layout_, kept_dx, &x, "dX");
    if (bad.empty()) {
      const Dims pooled = ActStoredDims(layout_, Pooled(x));
      std::vector<Dims> want = {pooled, dout_layout_ == PooledGradLayout::kGrouped ? pooled : Pooled(x), dims[2]};
      if (with_dbias_) want.push_back({x[1]});
      bad = ArgsMismatch(dims, want);
    }
    if (!bad.empty()) return Refused(name_, bad, why);
    return std::make_shared<BlockedMaxPoolGradKernel>(name_, x, layout_, then_, out_, with_dbias_, dout_layout_);
  }
  // args: argmax, dOut, dX (kept)[, dBias].
  void Run(const runtime::BufferView* args) const override {
    const auto* argmax = static_cast<const uint8_t*>(args[0].data);
    const auto* dout = static_cast<const float*>(args[1].data);
    if (out_ == DataType::kBF16) {
      MaxPool2x2GradPlainToBlockedBf16(argmax, dout, static_cast<uint16_t*>(args[2].data), x_[0], x_[1], x_[2], x_[3],
                                       group_, then_, with_dbias_ ? static_cast<float*>(args[3].data) : nullptr,
                                       dout_layout_);
    } else {
      MaxPool2x2GradPlainToBlocked(argmax, dout, static_cast<float*>(args[2].data), x_[0], x_[1], x_[2], x_[3], group_,
                                   then_, dout_layout_);
    }
  }

 private:
  std::string name_;
  Dims x_;
  ActLayout layout_;
  int64_t group_;
  PoolGradThen then_;
  DataType out_;
  bool with_dbias_;
  PooledGradLayout dout_layout_;
};

}  // namespace

// ---- BlockedMaxPoolUnit --------------------------------------------------------------

BlockedMaxPoolUnit::BlockedMaxPoolUnit(const std::string& step, int op, Operands operands)
    : Unit(step, {op}, {operands.x.Name()}, {operands.out, operands.argmax.Name()}), o_(std::move(operands)) {
  KILN_CHECK(o_.x.kind == DerivedKind::kKeptLayout && o_.argmax.kind == DerivedKind::kPoolArgmax &&
             o_.argmax.layout == o_.x.layout);
}

std::string BlockedMaxPoolUnit::Describe(const Cluster&) const {
  return "kiln max-pool 2x2/2 kernel reading " + o_.x.Name() + ", writing " + o_.out + " plain and " +
         o_.argmax.Name();
}

std::vector<EmittedKernel> BlockedMaxPoolUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = std::make_shared<BlockedMaxPoolKernel>(ctx.KernelName("maxpool"), o_.x_dims, o_.x.layout);
  k.args = {o_.x.Name(), o_.out, o_.argmax.Name()};
  k.num_inputs = 1;
  k.new_vars.push_back(o_.argmax.Desc(ctx.cluster()));
  return {k};
}

// ---- BlockedMaxPoolGradUnit ----------------------------------------------------------

namespace {

std::set<std::string> Written(const BlockedMaxPoolGradUnit::Operands& o) {
  std::set<std::string> w = {o.dx.Name()};
  if (!o.dbias.empty()) w.insert(o.dbias);
  return w;
}

}  // namespace

BlockedMaxPoolGradUnit::BlockedMaxPoolGradUnit(const std::string& step, std::vector<int> ops, Operands operands,
                                               PoolGradThen then)
    : Unit(step, std::move(ops), {operands.argmax.Name(), operands.dout.Name()}, Written(operands)),
      o_(std::move(operands)),
      then_(then) {
  KILN_CHECK(o_.argmax.kind == DerivedKind::kPoolArgmax && o_.dx.kind == DerivedKind::kKeptLayout &&
             o_.argmax.layout == o_.dx.layout);
  KILN_CHECK(!o_.dout.derived() || (o_.dout.kind == DerivedKind::kKeptLayout && o_.dout.layout == o_.dx.layout &&
                                    o_.dout.dtype == DataType::kFP32),
             "dOut ", o_.dout.Name(), " must be plain, or kept in f32 as dX ", o_.dx.Name());
}

std::string BlockedMaxPoolGradUnit::Describe(const Cluster&) const {
  return "kiln max-pool 2x2/2 gradient" + std::string(then_ == PoolGradThen::kReluGrad ? " and relu gradient" : "") +
         " kernel reading " + o_.argmax.Name() + " and " + o_.dout.Name() + ", writing " + o_.dx.Name();
}

std::vector<EmittedKernel> BlockedMaxPoolGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  const bool with_dbias = !o_.dbias.empty();
  KILN_CHECK(!with_dbias || o_.dx.dtype == DataType::kBF16);
  const PooledGradLayout dout = o_.dout.derived() ? PooledGradLayout::kGrouped : PooledGradLayout::kPlain;
  k.kernel = std::make_shared<BlockedMaxPoolGradKernel>(ctx.KernelName("maxpool_grad"), o_.x_dims, o_.dx.layout,
                                                        then_, o_.dx.dtype, with_dbias, dout);
  k.args = {o_.argmax.Name(), o_.dout.Name(), o_.dx.Name()};
  if (with_dbias) k.args.push_back(o_.dbias);
  k.num_inputs = 2;
  k.new_vars.push_back(o_.dx.Desc(ctx.cluster()));
  return {k};
}

// ---- ConvGradUnit --------------------------------------------------------------------

namespace {

std::set<std::string> Written(const ConvGradUnit::Operands& o) {
  std::set<std::string> w = {o.dfilter};
  if (!o.dinput.var.empty()) w.insert(o.dinput.Name());
  if (!o.dbias.empty()) w.insert(o.dbias);
  return w;
}

FusedConvSpec WithInput(FusedConvSpec spec, const ConvGradUnit::Operands& o) {
  KILN_CHECK(o.input.kind == DerivedKind::kNone || o.input.kind == DerivedKind::kKeptLayout);
  spec.src_layout = o.input.kind == DerivedKind::kKeptLayout ? o.input.layout : ActLayout::kPlain;
  spec.dinput_layout = ActLayout::kPlain;
  if (o.dinput.var.empty() || (o.dinput.kind == o.input.kind && o.dinput.layout == o.input.layout)) return spec;
  // A plain Input's gradient kept for its one reader.
  KILN_CHECK(o.input.kind == DerivedKind::kNone && o.dinput.kind == DerivedKind::kKeptLayout &&
                 o.dinput.dtype == DataType::kFP32,
             "dInput ", o.dinput.Name(), " must be stored as Input ", o.input.Name(), " or, Input plain, kept in f32");
  spec.dinput_layout = o.dinput.layout;
  return spec;
}

}  // namespace

ConvGradUnit::ConvGradUnit(const std::string& step, std::vector<int> ops, const FusedConvSpec& spec, Operands operands)
    : Unit(step, std::move(ops), {operands.input.Name(), operands.filter, operands.dy.Name()}, Written(operands)),
      spec_(WithInput(spec, operands)),
      o_(std::move(operands)) {}

std::string ConvGradUnit::Describe(const Cluster&) const {
  std::string s = "oneDNN convolution backward: ";
  if (!o_.dinput.var.empty()) s += o_.dinput.Name() + ", ";
  s += o_.dfilter;
  if (!o_.dbias.empty()) s += " and " + o_.dbias + " (the bias gradient in the weights' pass)";
  return s + " from " + o_.dy.Name();
}

std::vector<EmittedKernel> ConvGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = MakeConvGradKernel(spec_, !o_.dinput.var.empty(), !o_.dbias.empty(),
                                ctx.cluster().options().OneDnnSettings(), ctx.KernelName("conv_grad"), o_.dy.dtype);
  k.args = {o_.input.Name(), o_.filter, o_.dy.Name()};
  if (!o_.dinput.var.empty()) k.args.push_back(o_.dinput.Name());
  if (o_.dinput.derived()) k.new_vars.push_back(o_.dinput.Desc(ctx.cluster()));
  k.args.push_back(o_.dfilter);
  if (!o_.dbias.empty()) k.args.push_back(o_.dbias);
  k.num_inputs = 3;
  return {k};
}

}  // namespace kiln::jit
