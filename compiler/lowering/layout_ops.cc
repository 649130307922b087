#include "compiler/lowering/layout_ops.h"

#include "compiler/kernels/copy.h"
#include "framework/op_desc.h"

namespace kiln::jit {

ReshapeViewUnit::ReshapeViewUnit(const std::string& step, int op, Operands operands)
    : Unit(step, {op}, {operands.in}, {operands.out}), o_(std::move(operands)) {}

std::string ReshapeViewUnit::Describe(const Cluster& c) const {
  return "view of " + o_.in + " as " + DimsToString(c.dims(o_.out));
}

std::vector<EmittedKernel> ReshapeViewUnit::Emit(EmitContext& ctx) const {
  const Cluster& c = ctx.cluster();
  EmittedKernel k;
  k.kernel = MakeViewKernel(c.dims(o_.out), FromProto(c.var(o_.out).dtype()), ctx.KernelName("view"));
  k.args = {o_.in, o_.out};
  k.num_inputs = 1;
  k.views = {{0, 0}};
  return {k};
}

TransposeCopyUnit::TransposeCopyUnit(const std::string& step, int op, Operands operands, std::vector<int64_t> perm)
    : Unit(step, {op}, {operands.in}, {operands.out}), o_(std::move(operands)), perm_(std::move(perm)) {}

std::string TransposeCopyUnit::Describe(const Cluster&) const {
  return "copy with dims permuted by " + DimsToString(perm_);
}

std::vector<EmittedKernel> TransposeCopyUnit::Emit(EmitContext& ctx) const {
  const Cluster& c = ctx.cluster();
  EmittedKernel k;
  k.kernel = MakeTransposeKernel(c.dims(o_.in), perm_, FromProto(c.var(o_.in).dtype()), c.options().isa,
                                 ctx.KernelName("transpose"), c.type(ops().front()));
  k.args = {o_.in, o_.out};
  k.num_inputs = 1;
  return {k};
}

namespace {

constexpr const char* kStep = kLayoutOpsStep;

std::unique_ptr<Unit> Lower(const Cluster& c, int i) {
  const std::string& t = c.type(i);
  if (t == "reshape2") {
    return std::make_unique<ReshapeViewUnit>(kStep, i, ReshapeViewUnit::Operands{c.In(i, "X"), c.Out(i, "Out")});
  }
  if (t == "reshape2_grad") {
    const std::string dout = c.In(i, GradVarName("Out")), dx = c.Out(i, GradVarName("X"));
    if (dout.empty() || dx.empty()) return nullptr;
    return std::make_unique<ReshapeViewUnit>(kStep, i, ReshapeViewUnit::Operands{dout, dx});
  }
  if (t != "transpose2" && t != "transpose2_grad") return nullptr;
  const auto& axis = c.Attr<std::vector<int64_t>>(i, "axis");
  if (t == "transpose2") {
    return std::make_unique<TransposeCopyUnit>(kStep, i, TransposeCopyUnit::Operands{c.In(i, "X"), c.Out(i, "Out")},
                                               axis);
  }
  if (t == "transpose2_grad") {
    const std::string dout = c.In(i, GradVarName("Out")), dx = c.Out(i, GradVarName("X"));
    if (dout.empty() || dx.empty()) return nullptr;
    std::vector<int64_t> inverse(axis.size());
    for (size_t k = 0; k < axis.size(); ++k) inverse[axis[k]] = static_cast<int64_t>(k);
    return std::make_unique<TransposeCopyUnit>(kStep, i, TransposeCopyUnit::Operands{dout, dx}, inverse);
  }
  return nullptr;
}

}  // namespace

Units LowerLayoutOps(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().fuse_elementwise) return units;
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i < 0 || c.info(i).jit != JitLowering::kLayout || c.Excluded(kStep, i)) continue;
    std::unique_ptr<Unit> lowered = Lower(c, i);
    if (!lowered) continue;
    trace.Match(OpList(c, {i}) + " -> " + lowered->Describe(c));
    unit = std::move(lowered);
  }
  return units;
}

}  // namespace kiln::jit
