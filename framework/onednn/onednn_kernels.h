// oneDNN kernels for the ops of framework/ops, attached to registry entries
// that the reference registration created. Each kernel handles FP32 tensors
// in the cases oneDNN expresses directly and returns false otherwise (FP64,
// broadcast patterns needing a reduction, absent gradients, ...), so the
// executor runs the reference kernel. Primitives come from
// onednn::PrimitiveCache::Global().
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

// How many times, in this process, the oneDNN kernel of `op_type` handled a
// call (did the work instead of falling back). 0 for other ops. For tests,
// dumps and statistics.
int64_t OneDnnKernelRuns(std::string_view op_type);

}  // namespace kiln
