// Gradient merge (Paddle's GradientMergeOptimizer) in a training program:
// the optimizer updates once every k steps, with the mean (or the sum) of
// the k gradients, as one step at k times the batch size would. kiln has no
// control flow, so every step runs the same ops:
//   grad_merge_step   counter -> counter, Apply (1 on every k-th step)
//   grad_merge        per parameter: acc += grad; merged = acc / k; acc = 0 on Apply
//   <update>(Apply)   the usual update of the merged gradient, which leaves the
//                     parameter and its state as they were when Apply is 0
// The counter and the accumulators are persistable (saved in checkpoints, so
// a run resumed mid-cycle continues it). A learning-rate schedule appended
// after the updates reads the flag and advances once per update.
#pragma once

#include <cstdint>
#include <string>

#include "framework/program_builder.h"

namespace kiln {

// Declares "<prefix>.grad_merge_step" (persistable fp32 [1], 0: the steps
// taken since the last update) and "<prefix>.grad_merge_apply" (the flag,
// fp32 [1], not persistable), and appends the grad_merge_step op with
// op_role "optimize". Returns the flag.
std::string AppendGradMergeStep(ProgramBuilder& b, const std::string& prefix, int64_t k_steps);

// Declares "<param>.grad_merge" (persistable, the gradient's dims, 0) and
// "<grad>@MERGED" (not persistable), and appends the grad_merge op of
// `grad` with op_role "optimize". Returns the merged gradient, which the
// update reads instead of `grad`.
std::string AppendGradMerge(ProgramBuilder& b, const std::string& param, const std::string& grad,
                            const std::string& apply, int64_t k_steps, bool avg);

}  // namespace kiln
