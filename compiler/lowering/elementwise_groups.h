// Lowering step: the elementwise fragments of the ops no earlier step took
// (their registry entries' EwProgram meaning: activations, binary ops with
// broadcasts, their grads, optimizer updates) are grouped by iteration space
// into one generated kernel per group. A fragment joins the first group with
// its space that it can move up to without breaking a dependency; values
// that stay inside a group live in registers.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units GroupElementwise(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kElementwiseGroupsStep[] = "elementwise_groups";

}  // namespace kiln::jit
