#include "compiler/lowering/units/blocked_residual.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/codegen/ew_runtime_kernel.h"
#include "compiler/kernels/blocked_residual.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "framework/error.h"

namespace kiln::jit {
namespace {

bool Kept(const DerivedBuffer& b) { return b.kind == DerivedKind::kKeptLayout; }

class ResidualKernel final : public runtime::Kernel {
 public:
  ResidualKernel(std::string name, const Dims& dims, ActLayout layout, bool grad, bool want_ds,
                 const ResidualLayouts& kept)
      : name_(std::move(name)), dims_(dims), layout_(layout), grad_(grad), want_ds_(want_ds), kept_(kept) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override {
    const std::string in = std::string(" in ") + ActLayoutName(layout_);
    auto where = [&](bool kept) { return kept ? in : std::string(" plain"); };
    return grad_ ? "kiln relu and residual-sum gradient, da written" + in + ", Out and dOut read" +
                       where(kept_.out && kept_.dout) + (want_ds_ ? ", the shortcut's written" + where(kept_.ds) : "")
                 : "kiln residual sum + relu reading the batch norm's output" + in + ", the shortcut" +
                       where(kept_.s) + ", writing" + where(kept_.out);
  }
  // The loops take N, C, H * W as arguments: the same kernel for a new
  // N, H, W (the channels stay).
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override {
    // The forward's a is kept; the backward's Out as kept_.out says.
    const bool first_kept = !grad_ || kept_.out;
    Dims x;
    if (!dims.empty()) x = KeptLogicalDims(first_kept ? layout_ : ActLayout::kPlain, dims[0], dims_[1]);
    std::string bad;
    if (x.empty() || Numel(x) <= 0) {
      bad = StrCat(grad_ ? "Out" : "a", " must be an [N, ", dims_[1], ", H, W] activation",
                   first_kept ? std::string(" in ") + ActLayoutName(layout_) : std::string(),
                   " without a zero dim, got ", dims.empty() ? std::string("none") : DimsToString(dims[0]));
    } else {
      const Dims kept = ActStoredDims(layout_, x);
      auto as = [&](bool k) { return k ? kept : x; };
      std::vector<Dims> want = grad_ ? std::vector<Dims>{as(kept_.out), as(kept_.dout), kept}
                                     : std::vector<Dims>{kept, as(kept_.s), as(kept_.out)};
      if (grad_ && want_ds_) want.push_back(as(kept_.ds));
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
    return std::make_shared<ResidualKernel>(name_, x, layout_, grad_, want_ds_, kept_);
  }
  // Element i of an output depends on element i of an input stored alike
  // alone, read first (compiler/kernels/blocked_residual.cc): Out may take
  // s's memory, ds dOut's, when they die here and are stored alike.
  std::vector<std::pair<int, int>> InplacePairs() const override {
    if (!grad_ && kept_.s == kept_.out) return {{1, 0}};
    if (grad_ && want_ds_ && kept_.ds == kept_.dout) return {{1, 1}};
    return {};
  }
  // args: a (kept), s, Out; or Out, dOut, da (kept)[, ds].
  void Run(const runtime::BufferView* args) const override {
    const int64_t n = dims_[0], c = dims_[1], hw = dims_[2] * dims_[3], b = ActChannelGroup(layout_, c);
    if (!grad_) {
      ResidualAddRelu(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data),
                      static_cast<float*>(args[2].data), n, c, hw, b, kept_);
      return;
    }
    ResidualAddReluGrad(static_cast<const float*>(args[0].data), static_cast<const float*>(args[1].data),
                        static_cast<float*>(args[2].data), want_ds_ ? static_cast<float*>(args[3].data) : nullptr, n,
                        c, hw, b, kept_);
  }

 private:
  std::string name_;
  Dims dims_;
  ActLayout layout_;
  bool grad_, want_ds_;
  ResidualLayouts kept_;
};

// A kernel generated for the cluster's ISA over kept buffers of one
// activation ([N,C,H,W] `dims` stored in `layout`), read and written alike
// (their padded lanes follow the program: zero in, zero out): `program`
// reads `inputs` of them, then stores `outputs`. It resizes to every
// argument one activation of C channels stored in `layout`, of new N, H, W.
std::shared_ptr<const runtime::Kernel> FlatKernel(const Cluster& c, const EwProgram& program, int inputs, int outputs,
                                                  ActLayout layout, const Dims& dims, const std::string& name,
                                                  const std::string& what) {
  const Isa isa = c.options().isa;
  const int64_t numel = Numel(ActStoredDims(layout, dims)), channels = dims[1];
  const EwLayout flat = CollapseLayout({numel}, std::vector<Dims>(inputs, Dims{numel}),
                                       std::vector<Dims>(outputs, Dims{numel}));
  auto kernel = std::make_shared<FusedElementwiseKernel>(name, program, flat, isa);
  kernel->Create();
  const EwLayoutOf elements = FlatLayoutOf(std::vector<bool>(inputs, false));
  EwLayoutOf guarded = [=](const std::vector<Dims>& args, std::string* why) -> std::optional<EwLayout> {
    for (size_t k = 0; k < args.size(); ++k) {
      const Dims x = KeptLogicalDims(layout, args[k], channels);
      if (x.empty() || Numel(x) <= 0 || args[k] != args[0]) {
        if (why != nullptr) {
          *why = StrCat("arg ", k, " ", DimsToString(args[k]), " must be an [N, ", channels, ", H, W] activation in ",
                        ActLayoutName(layout), " without a zero dim, as every other argument");
        }
        return std::nullopt;
      }
    }
    return elements(args, why);
  };
  return MakeEwRuntimeKernel(kernel, std::string("generated ") + IsaName(isa) + " kernel, " + what + " over " +
                                         kernel->layout().ToString(),
                             std::move(guarded));
}

std::set<std::string> Names(const std::vector<DerivedBuffer>& bufs) {
  std::set<std::string> names;
  for (const DerivedBuffer& b : bufs) names.insert(b.Name());
  return names;
}

std::set<std::string> Written(const BlockedResidualGradUnit::Operands& o) {
  std::set<std::string> w = {o.da.Name()};
  if (!o.ds.var.empty()) w.insert(o.ds.Name());
  return w;
}

// A plain var, or one kept in `layout`.
bool PlainOrKeptIn(const DerivedBuffer& b, ActLayout layout) {
  return b.kind == DerivedKind::kNone || (Kept(b) && b.layout == layout);
}

}  // namespace

BlockedResidualUnit::BlockedResidualUnit(const std::string& step, std::vector<int> ops, Operands operands)
    : Unit(step, std::move(ops), {operands.a.Name(), operands.s.Name()}, {operands.out.Name()}),
      o_(std::move(operands)) {
  KILN_CHECK(Kept(o_.a) && o_.dims.size() == 4 && PlainOrKeptIn(o_.s, o_.a.layout) &&
             PlainOrKeptIn(o_.out, o_.a.layout));
}

std::string BlockedResidualUnit::Describe(const Cluster&) const {
  return "kiln residual sum + relu kernel reading " + o_.a.Name() + " and " + o_.s.Name() + ", writing " +
         o_.out.Name() + (Kept(o_.out) ? "" : " plain");
}

std::vector<EmittedKernel> BlockedResidualUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  ResidualLayouts kept;
  kept.s = Kept(o_.s);
  kept.out = Kept(o_.out);
  if (kept.s && kept.out) {  // one flat pass over the kept buffers
    EwProgram p;
    p.Store(0, p.Relu(p.Add(p.Load(0), p.Load(1))));
    k.kernel = FlatKernel(ctx.cluster(), p, 2, 1, o_.a.layout, o_.dims, ctx.KernelName("residual"),
                          std::string("residual sum + relu of ") + ActLayoutName(o_.a.layout) + " buffers");
  } else {
    k.kernel = std::make_shared<ResidualKernel>(ctx.KernelName("residual"), o_.dims, o_.a.layout, false, false, kept);
  }
  k.args = {o_.a.Name(), o_.s.Name(), o_.out.Name()};
  k.num_inputs = 2;
  if (o_.out.derived()) k.new_vars.push_back(o_.out.Desc(ctx.cluster()));
  return {k};
}

BlockedResidualGradUnit::BlockedResidualGradUnit(const std::string& step, std::vector<int> ops, Operands operands)
    : Unit(step, std::move(ops), {operands.out.Name(), operands.dout.Name()}, Written(operands)),
      o_(std::move(operands)) {
  KILN_CHECK(Kept(o_.da) && o_.dims.size() == 4 && PlainOrKeptIn(o_.out, o_.da.layout) &&
             PlainOrKeptIn(o_.dout, o_.da.layout) && PlainOrKeptIn(o_.ds, o_.da.layout));
}

std::string BlockedResidualGradUnit::Describe(const Cluster&) const {
  return "kiln relu and residual-sum gradient kernel: " + o_.da.Name() +
         (o_.ds.var.empty() ? "" : " and " + o_.ds.Name()) + " from " + o_.dout.Name();
}

std::vector<EmittedKernel> BlockedResidualGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  ResidualLayouts kept;
  kept.out = Kept(o_.out);
  kept.dout = Kept(o_.dout);
  kept.ds = Kept(o_.ds);
  const bool want_ds = !o_.ds.var.empty();
  if (kept.out && kept.dout && (!want_ds || kept.ds)) {  // one flat pass
    EwProgram p;
    const EwValue d = p.SelectGtZero(p.Load(0), p.Load(1));
    p.Store(0, d);
    if (want_ds) p.Store(1, d);
    k.kernel = FlatKernel(ctx.cluster(), p, 2, want_ds ? 2 : 1, o_.da.layout, o_.dims,
                          ctx.KernelName("residual_grad"),
                          std::string("relu and residual-sum gradient of ") + ActLayoutName(o_.da.layout) + " buffers");
  } else {
    k.kernel = std::make_shared<ResidualKernel>(ctx.KernelName("residual_grad"), o_.dims, o_.da.layout, true, want_ds,
                                                kept);
  }
  k.args = {o_.out.Name(), o_.dout.Name(), o_.da.Name()};
  if (!o_.ds.var.empty()) k.args.push_back(o_.ds.Name());
  k.num_inputs = 2;
  k.new_vars.push_back(o_.da.Desc(ctx.cluster()));
  if (o_.ds.derived()) k.new_vars.push_back(o_.ds.Desc(ctx.cluster()));
  return {k};
}

// ---- KeptSumUnit ----------------------------------------------------------------------

KeptSumUnit::KeptSumUnit(const std::string& step, std::vector<int> ops, Operands operands)
    : Unit(step, std::move(ops), Names(operands.x), {operands.out.Name()}), o_(std::move(operands)) {
  KILN_CHECK(Kept(o_.out) && o_.x.size() >= 2 && o_.dims.size() == 4);
  for (const DerivedBuffer& x : o_.x) KILN_CHECK(Kept(x) && x.layout == o_.out.layout);
}

std::string KeptSumUnit::Describe(const Cluster&) const {
  std::string s = "kiln sum of";
  for (const DerivedBuffer& x : o_.x) s += " " + x.Name();
  return s + " into " + o_.out.Name();
}

std::vector<EmittedKernel> KeptSumUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  const int count = static_cast<int>(o_.x.size());
  EwProgram p;
  EwValue sum = p.Load(0);
  for (int i = 1; i < count; ++i) sum = p.Add(sum, p.Load(i));
  p.Store(0, sum);
  k.kernel = FlatKernel(ctx.cluster(), p, count, 1, o_.out.layout, o_.dims,
                        ctx.KernelName("kept_sum"), std::string("sum of ") + ActLayoutName(o_.out.layout) + " buffers");
  for (const DerivedBuffer& x : o_.x) k.args.push_back(x.Name());
  k.num_inputs = count;
  k.args.push_back(o_.out.Name());
  k.new_vars.push_back(o_.out.Desc(ctx.cluster()));
  return {k};
}

}  // namespace kiln::jit
