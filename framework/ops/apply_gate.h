// The optional `Apply` input of the parameter updates (sgd, momentum, adam,
// adamw), for gradient merge (grad_merge_ops.cc): a [1] flag that is 1 on
// the steps that update and 0 on the steps that only accumulate. At 0 every
// output keeps the value of the input it updates in place (ParamOut =
// Param, moments, velocity, beta powers), bit for bit; at 1, or without
// the input, the op is what it was.
//
// kiln has no control flow, so the flag gates elementwise: the JIT form
// computes the update and selects it or the old value per element
// (select(apply, new, old)), inside the same generated update kernel.
#pragma once

#include "framework/operator.h"

namespace kiln {

// `op` (an update op whose outputs all pair with an input in op.inplace)
// with the Apply slot added: InferShape also checks that Apply holds one
// element; the reference kernel copies each in-place input to its output
// (nothing when they are one var) when Apply is 0; the elementwise
// fragments end each write in a select on Apply.
OpInfo WithApplyGate(OpInfo op);

}  // namespace kiln
