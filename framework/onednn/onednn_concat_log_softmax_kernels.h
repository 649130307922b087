// oneDNN kernels of concat, split_grad (a concat of the out-grads),
// log_softmax and log_softmax_grad. Like those of onednn_kernels.h they take
// FP32 tensors in the cases oneDNN expresses directly and return false
// otherwise (FP64, an absent or empty gradient, ...), so the reference
// kernel runs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "framework/operator.h"

namespace kiln {

// (op type, kernel) pairs; AttachOneDnnKernels attaches them with the others
// (and counts their runs in OneDnnKernelRuns).
std::vector<std::pair<std::string, OneDnnKernelFn>> ConcatLogSoftmaxOneDnnKernels();

}  // namespace kiln
