// Reverse-mode autodiff over a program: append_backward of OPS.md.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "framework/op_registry.h"
#include "framework/proto/framework.pb.h"

namespace kiln {

// Inserts into block 0 the grad ops of `loss`, right after the (last) op that
// writes `loss`, so ops that follow it in the block (optimizers reading
// w@GRAD) run after the gradients exist. Gradients are named v@GRAD and
// declared with v's dims and dtype. A var that feeds several ops gets one
// partial gradient per consumer (v@GRAD@RENAME@k) summed by a `sum` op.
//
// A var gets a gradient when it is floating point, not stop_gradient, and the
// loss depends on it through differentiable slots. So the ops without a grad
// maker whose outputs are integer or bool (arg_max, arg_min, the comparisons)
// or whose inputs are (one_hot) stop the gradient instead of failing, as do
// where's Condition, gather's Index and a cast from or to an integer dtype.
// Returns (var, var@GRAD) for every persistable var that got a gradient, in
// declaration order.
//
// Throws InvalidArgument when `loss` is not floating point or not written by
// any op, or an op on the path to the loss has no grad maker.
std::vector<std::pair<std::string, std::string>> AppendBackward(proto::ProgramDesc* program,
                                                                const std::string& loss,
                                                                const OpRegistry& registry = OpRegistry::Global());

}  // namespace kiln
