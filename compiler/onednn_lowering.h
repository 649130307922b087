// oneDNN anchors of the JIT: a matmul with its bias add (and a ReLU/GELU
// after it) folded into one oneDNN matmul primitive, created at compile time
// for the cluster's concrete shapes and run on the bound buffers.
#pragma once

#include <memory>
#include <string>

#include "framework/tensor.h"
#include "runtime/program.h"

namespace kiln::jit {

enum class MatmulActivation { kNone, kRelu, kGelu, kGeluTanh };

struct FusedMatmulSpec {
  Dims x_dims;  // [..., M', K]: leading dims fold into M
  Dims w_dims;  // [K, N] (or [N, K] with transpose_w)
  bool transpose_w = false;
  float alpha = 1.f;
  bool bias = false;  // adds a [N] bias row
  MatmulActivation activation = MatmulActivation::kNone;
};

// W -= lr * X^T @ dY for X [..., K] (leading dims fold into M), dY [..., N],
// W [K, N]: the weight gradient of a matmul and its SGD step as one oneDNN
// matmul (scale -lr, sum post-op into W), so the gradient never exists.
// Arguments at run time: X, dY, LearningRate [1], W (read) -> W (written).
// With `keep_old`: X, dY, LearningRate, W -> W_old, W, where W_old receives
// W before the step (so dX can be computed after it, from W_old, and X dies
// here).
std::shared_ptr<const runtime::Kernel> MakeMatmulSgdKernel(const Dims& x_dims, const Dims& w_dims,
                                                           const std::string& name, bool keep_old = false);

// The batch-1 form of the above plus the input gradient, in one pass over W
// (compiler/gemv.h): X [1,K], dY [1,N], lr [1], W [K,N] -> dX [1,K] (when
// `with_dx`), W. Arguments: X, dY, LearningRate, W | [dX,] W.
std::shared_ptr<const runtime::Kernel> MakeGemvGradSgdKernel(int64_t k, int64_t n, bool with_dx,
                                                             const std::string& name);

// Throws kiln::Error when oneDNN has no implementation for the spec.
// A one-row X without transposes, alpha or GELU runs as a kiln matrix-vector
// kernel instead (no weight repacking).
// Arguments at run time: X, W[, bias] -> Out.
std::shared_ptr<const runtime::Kernel> MakeFusedMatmulKernel(const FusedMatmulSpec& spec, const std::string& name);

}  // namespace kiln::jit
