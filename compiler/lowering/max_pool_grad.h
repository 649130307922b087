// Lowering step: the gradient of 2x2, stride-2, unpadded max pooling becomes
// a kiln kernel (compiler/kernels/gemv.h's MaxPool2x2Grad: the first maximum of each
// window gets dOut) instead of oneDNN's backward, which needs the forward's
// workspace and so recomputes the forward (it ran in another cluster).
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units LowerMaxPoolGrad(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kMaxPoolGradStep[] = "max_pool_grad";

}  // namespace kiln::jit
