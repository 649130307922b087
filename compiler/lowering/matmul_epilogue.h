// Lowering step: a matmul whose output only feeds a bias add of a [N] row
// (whose sum only feeds a relu or gelu) becomes one oneDNN matmul with bias
// and an eltwise post-op, so the intermediate values never exist.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units FuseMatmulEpilogue(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kMatmulEpilogueStep[] = "matmul_epilogue";

}  // namespace kiln::jit
