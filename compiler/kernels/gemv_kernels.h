// Batch-1 matmul kernels of the JIT, on kiln's matrix-vector routines
// (compiler/kernels/gemv.h): with one row, oneDNN's brgemm spends more time
// repacking the weights than computing, while these stream each weight once.
// The lowering picks them when X has one row; they need no oneDNN primitive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/program.h"

namespace kiln::jit {

// Out[1,N] = act(X[1,K] @ W[K,N] (+ bias[N])), act relu when `relu`.
// Arguments at run time: X, W[, bias] -> Out.
std::shared_ptr<const runtime::Kernel> MakeGemvMatmulKernel(int64_t k, int64_t n, bool bias, bool relu,
                                                            const std::string& name);

// The weight gradient of a batch-1 matmul with its SGD step, plus the input
// gradient, in one pass over W: X [1,K], dY [1,N], lr [1], W [K,N] -> dX [1,K]
// (when `with_dx`), W. Arguments: X, dY, LearningRate, W | [dX,] W.
std::shared_ptr<const runtime::Kernel> MakeGemvGradSgdKernel(int64_t k, int64_t n, bool with_dx,
                                                             const std::string& name);

}  // namespace kiln::jit
