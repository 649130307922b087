// Reverse-mode autodiff over a program: append_backward of OPS.md.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/op_registry.h"
#include "framework/proto/framework.pb.h"

namespace kiln {

// What one backward pass differentiates.
struct BackwardSpec {
  // The vars whose (summed) value is differentiated.
  std::vector<std::string> targets;
  // Per target, the var holding its incoming gradient (same dims and dtype
  // as the target); empty, or "" for a target: ones (d sum(target)).
  std::vector<std::string> target_grads;
  // Vars that get a gradient even when they are stop_gradient (the inputs
  // kiln.gradients asks for, such as fed data).
  std::set<std::string> wrt;
};

// Inserts into block 0 the grad ops of `spec`, right after the last op that
// writes a target, so ops that follow it in the block (optimizers reading
// w@GRAD) run after the gradients exist. Every inserted op carries
// op_role "backward". Gradients are named v@GRAD and declared with v's dims
// and dtype; where the program already declares that name (an earlier
// backward pass), the new pass writes v@GRAD@1 (@2, ...) instead, so no
// gradient an earlier pass computed is overwritten. A var that feeds several
// ops gets one partial gradient per consumer (v@GRAD@RENAME@k) summed by a
// `sum` op.
//
// A var gets a gradient when it is floating point, not stop_gradient (or in
// spec.wrt), and a target depends on it through differentiable slots.
// Returns var -> its gradient var for every var that got one.
//
// Throws InvalidArgument when a target is not written by any op, a target
// gradient does not match its target (or there are more target gradients
// than targets), or an op on the path to a target has no grad maker. The
// program is unchanged when it throws.
std::map<std::string, std::string> AppendBackwardPass(proto::ProgramDesc* program, const BackwardSpec& spec,
                                                      const OpRegistry& registry = OpRegistry::Global());

// AppendBackwardPass of one target, `loss`, seeded with ones. Returns
// (var, its gradient) for every persistable var that got a gradient, in
// declaration order.
std::vector<std::pair<std::string, std::string>> AppendBackward(proto::ProgramDesc* program,
                                                                const std::string& loss,
                                                                const OpRegistry& registry = OpRegistry::Global());

}  // namespace kiln
