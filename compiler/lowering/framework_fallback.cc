#include "compiler/lowering/framework_fallback.h"

namespace kiln::jit {

Units FallBackToFramework(const Cluster& c, Units units, StepTrace& trace) {
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i < 0) continue;
    trace.Match(OpList(c, {i}) + " -> framework reference kernel");
    unit = std::make_unique<FrameworkOpUnit>(kFrameworkFallbackStep, c, i);
  }
  return units;
}

}  // namespace kiln::jit
