// Lowering step: a conv2d whose output only feeds a bias add of a [C_out]
// vector on the channel axis (and/or a relu or gelu of it) becomes one oneDNN
// convolution with bias and an eltwise post-op: one pass over the output
// instead of three, and no intermediate activations.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units FuseConvEpilogue(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kConvEpilogueStep[] = "conv_epilogue";

}  // namespace kiln::jit
