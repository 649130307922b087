// oneDNN kernels of batch_norm and batch_norm_grad (FP32), listed into
// AttachOneDnnKernels' table (onednn_kernels.cc), which attaches them and
// counts their runs like every other oneDNN kernel.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "framework/operator.h"

namespace kiln {

// (op type, kernel) pairs.
std::vector<std::pair<std::string, OneDnnKernelFn>> BatchNormOneDnnKernels();

}  // namespace kiln
