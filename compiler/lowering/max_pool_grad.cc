#include "compiler/lowering/max_pool_grad.h"

#include "compiler/lowering/units/max_pool_grad.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kMaxPoolGradStep;

bool Matches(const Cluster& c, int i) {
  const std::string out = c.In(i, "Out"), dout = c.In(i, GradVarName("Out"));
  const std::string dx = c.Out(i, GradVarName("X"));
  if (out.empty() || dout.empty() || dx.empty() || !IsMaxPool2x2(c, i)) return false;
  return c.IsF32(out) && c.IsF32(dout) && c.dims(out) == c.dims(dout);
}

}  // namespace

Units LowerMaxPoolGrad(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().fuse_elementwise) return units;
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i < 0 || c.type(i) != "pool2d_grad" || c.Excluded(kStep, i) || !Matches(c, i)) continue;
    trace.Match(OpList(c, {i}) + " -> kiln max-pool 2x2/2 gradient kernel");
    const std::string x = c.In(i, "X");
    unit = std::make_unique<MaxPoolGradUnit>(
        kStep, i,
        MaxPoolGradUnit::Operands{x, c.In(i, "Out"), c.In(i, GradVarName("Out")), c.Out(i, GradVarName("X")),
                                  c.dims(x)});
  }
  return units;
}

}  // namespace kiln::jit
