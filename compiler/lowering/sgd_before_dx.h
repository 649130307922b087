// Lowering step: when the X of a weight-gradient fold dies there and is
// bigger than W, the sgd step runs first (copying the old W out) and
// dX = dY W_old^T follows as a plain matmul, so dX may take X's memory.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units RunSgdBeforeDx(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kSgdBeforeDxStep[] = "sgd_before_dx";

}  // namespace kiln::jit
