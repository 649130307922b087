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
std::shared_ptr<const runtime::Kernel> MakeMatmulSgdKernel(const Dims& x_dims, const Dims& w_dims,
                                                           const std::string& name);

// Throws kiln::Error when oneDNN has no implementation for the spec.
// Arguments at run time: X, W[, bias] -> Out.
std::shared_ptr<const runtime::Kernel> MakeFusedMatmulKernel(const FusedMatmulSpec& spec, const std::string& name);

}  // namespace kiln::jit
