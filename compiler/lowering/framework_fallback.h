// Lowering step, the last: every op no step claimed runs its framework
// reference kernel on views of the bound buffers.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units FallBackToFramework(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kFrameworkFallbackStep[] = "framework_fallback";

}  // namespace kiln::jit
