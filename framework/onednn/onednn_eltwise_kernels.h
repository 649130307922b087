// oneDNN kernels of the activations (relu, tanh, sigmoid, exp, gelu and
// their grads), scale (+grad), the binary elementwise ops and sum (FP32),
// listed into AttachOneDnnKernels' table (onednn_kernels.cc), which attaches
// them and counts their runs like every other oneDNN kernel.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "framework/operator.h"

namespace kiln {

// (op type, kernel) pairs.
std::vector<std::pair<std::string, OneDnnKernelFn>> EltwiseOneDnnKernels();

}  // namespace kiln
