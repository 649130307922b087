#include "compiler/lowering/dead_ops.h"

namespace kiln::jit {

Units DropDeadOps(const Cluster& c, Units units, StepTrace& trace) {
  std::vector<int> dead;
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i < 0 || !c.dead(i)) continue;
    dead.push_back(i);
    unit = std::make_unique<DroppedOp>(kDeadOpsStep, i);
  }
  if (!dead.empty()) trace.Match(OpList(c, dead) + " -> dropped: nothing the cluster uses reads what they write");
  return units;
}

}  // namespace kiln::jit
