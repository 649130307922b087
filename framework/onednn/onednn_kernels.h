// oneDNN kernels for the ops of framework/ops, attached to registry entries
// that the reference registration created. Each kernel handles FP32 tensors
// in the cases oneDNN expresses directly and returns false otherwise (FP64,
// broadcast patterns needing a reduction, absent gradients, ...), so the
// executor runs the reference kernel. Primitives come from
// onednn::PrimitiveCache::Global(); the kernels run with the settings their
// ExecContext carries (ExecContext::onednn(): slow implementations,
// deterministic primitives, the compute type of matmul and conv2d).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class OpRegistry;

// Sets `onednn_kernel` on the entries of the ops listed by OneDnnKernelOps()
// that `r` holds (absent ones are skipped).
void AttachOneDnnKernels(OpRegistry& r);

// Op types that have a oneDNN kernel, sorted.
std::vector<std::string> OneDnnKernelOps();

// Op types whose oneDNN kernel runs correctly in place, handing oneDNN one
// memory object for src and dst when Out shares X's buffer (seed 000): the
// eltwise activations (relu, tanh, sigmoid, exp, gelu, scale), softmax,
// elementwise_add (over its first source) and sum (over X[0]). The in-place
// pass fires only for these. Sorted.
const std::vector<std::string>& OneDnnInplaceOps();

// How many times, in this process, the oneDNN kernel of `op_type` handled a
// call (did the work instead of falling back). 0 for other ops. For tests,
// dumps and statistics.
int64_t OneDnnKernelRuns(std::string_view op_type);

}  // namespace kiln
