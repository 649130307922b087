// Lowering step: activations that run from one kept-layout unit to others
// stay in that layout, and so do their gradients (after blocked_batch_norm,
// whose units it rewrites). A value v qualifies when
//
//   - a batch norm (onednn_batch_norm, + relu) or a block's residual sum
//     (blocked_residual) writes it plain, reordering out of the layout it
//     works in, and its gradient dv comes back plain into that unit's
//     gradient (onednn_batch_norm_grad, blocked_residual_grad);
//   - every reader of v can read it in that layout: a convolution
//     (onednn_conv, as its src: oneDNN's forward picks that layout for the
//     src by itself), a convolution's gradient (onednn_conv_grad: it reads
//     its src and writes its dInput there), the next residual sum (as its
//     shortcut s; its gradient writes ds there), the residual sum's own
//     gradient (which reads Out);
//   - dv is the gradient those readers write (dInput, ds), one of them
//     alone or their `sum`, which then runs as a kiln sum over the kept
//     buffers (kept_sum).
//
// In a resnet that is every block's first batch norm + relu (read by the
// second convolution), every block's output (read by the next block's
// first convolution and its shortcut) and each downsampling shortcut's
// batch norm output (read by the residual sum): the activations stay
// blocked from the stem's batch norm to the last block's output, and each
// reorder of an activation between them goes.
//
// Fires when v and dv stay in the cluster with no other reader or writer,
// the parts of dv are read by their sum alone, compute is f32, and no unit
// involved is excluded from the step.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units KeepActivations(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kKeptActivationsStep[] = "kept_activations";

}  // namespace kiln::jit
