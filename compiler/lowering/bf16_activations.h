// Lowering step (--amp bf16): a value that a generated elementwise kernel
// computes and that only bf16 matmuls read (as their X, or as the dY of a
// weight-gradient + sgd matmul) is stored by that kernel in bf16 alone, as
// its bf16 copy (Bf16CopyOf), and the matmuls bind it without a reorder: the cast is fused
// into the kernel that produces the value, and the f32 value is never
// written. A dY read this way makes the matmul+SGD kernel scale X by lr.
//
// It fires only where every reader is such a matmul and the value does not
// leave the cluster; the input-gradient-only matmul_grad that weight_grad_fold
// leaves becomes a oneDNN matmul unit for it (dX = dY W^T).
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units StoreBf16Activations(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kBf16ActivationsStep[] = "bf16_activations";

}  // namespace kiln::jit
