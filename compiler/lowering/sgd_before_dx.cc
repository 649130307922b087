#include "compiler/lowering/sgd_before_dx.h"

#include "compiler/lowering/units/matmul_sgd.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kSgdBeforeDxStep;

// X dies at the fold (made in the cluster, or an input that dies in it, and
// read by nothing after the grad op), X is bigger than W (the copy of W pays
// off), and dX has X's dims with dY's leading dims (dX = dY W^T as a plain
// matmul).
bool Worthwhile(const Cluster& c, const MatmulSgdUnit& m) {
  const MatmulSgdUnit::Operands& o = m.operands();
  const int grad_op = m.ops().front();
  if (o.dx.empty() || m.keep_old()) return false;
  if (c.IsInput(o.x) && !c.IsDonatable(o.x)) return false;
  if (c.IsOutput(o.x) || c.RewrittenAfter(grad_op, o.x)) return false;
  if (Numel(o.x_dims) <= Numel(o.w_dims)) return false;
  if (c.Readers(grad_op, o.x).back() != grad_op) return false;
  if (c.dims(o.dx) != o.x_dims) return false;
  Dims expect = c.dims(o.dy.var);
  expect.back() = o.w_dims[0];
  return expect == o.x_dims;
}

}  // namespace

Units RunSgdBeforeDx(const Cluster& c, Units units, StepTrace& trace) {
  for (size_t u = 1; u < units.size(); ++u) {
    const auto* m = dynamic_cast<const MatmulSgdUnit*>(units[u].get());
    if (m == nullptr || c.Excluded(kStep, m->ops().front()) || !Worthwhile(c, *m)) continue;
    // The dX unit of the same grad op stands right before the fold.
    if (!units[u - 1] || units[u - 1]->ops() != std::vector<int>{m->ops().front()}) continue;
    const MatmulSgdUnit::Operands& o = m->operands();
    auto step = std::make_unique<MatmulSgdUnit>(kStep, m->ops(), o, /*keep_old=*/true);
    const DerivedBuffer old_w = step->old_w();
    auto dx = std::make_shared<proto::OpDesc>(OpBuilder("matmul")
                                                  .In("X", {o.dy.Name()})
                                                  .In("Y", {old_w.Name()})
                                                  .Out("Out", {o.dx})
                                                  .Attr("transpose_Y", true)
                                                  .Build());
    trace.Match(OpList(c, m->ops()) + " -> the step first (old W kept as " + old_w.Name() + "), then dX = dY " +
                old_w.Name() + "^T");
    units[u - 1] = std::move(step);
    units[u] = std::make_unique<OneDnnOpUnit>(kStep, c, m->ops().front(), OneDnnOpUnit::Operands{dx, {old_w}});
  }
  return units;
}

}  // namespace kiln::jit
