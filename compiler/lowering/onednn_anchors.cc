#include "compiler/lowering/onednn_anchors.h"

namespace kiln::jit {

Units ClaimOneDnnAnchors(const Cluster& c, Units units, StepTrace& trace) {
  constexpr const char* kStep = kOneDnnAnchorsStep;
  if (!c.options().use_onednn) return units;
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i < 0 || !c.info(i).onednn_kernel || c.Excluded(kStep, i)) continue;
    trace.Match(OpList(c, {i}) + " -> framework oneDNN kernel");
    unit = std::make_unique<OneDnnOpUnit>(kStep, c, i);
  }
  return units;
}

}  // namespace kiln::jit
