// Lowering step: a matmul_grad whose weight gradient is read only by the sgd
// step of that weight becomes one oneDNN matmul, W -= lr * X^T dY, run right
// after the input gradient (so X and dY die there, not at the end of the
// backward pass); the weight gradient never exists.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units FoldWeightGradIntoSgd(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kWeightGradFoldStep[] = "weight_grad_fold";

}  // namespace kiln::jit
