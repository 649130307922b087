// oneDNN batch normalisation (training mode) on activations a cluster keeps
// in the layout its convolution writes (framework/act_layout.h), for the
// blocked_batch_norm step (compiler/lowering/blocked_batch_norm.h): the
// forward with the batch statistics, optionally with the relu after it
// fused (oneDNN's fuse_norm_relu and its workspace, a relu mask), and the
// backward, which then applies relu's gradient from that mask.
//
// The statistics follow kiln's batch_norm op (framework/ops/batch_norm_op.cc):
// SavedMean is the batch mean, SavedVariance 1/sqrt(var + epsilon) of the
// biased batch variance, and the running statistics are updated in place
// with the unbiased one, as the framework's oneDNN kernel does.
//
// Resize: the kernel made again for an X of new N, H, W (the primitive from
// the cache), the channels and layouts kept; other dims are refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "framework/act_layout.h"
#include "framework/onednn/settings.h"
#include "framework/tensor.h"
#include "runtime/program.h"

namespace kiln::jit {

struct BatchNormSpec {
  Dims x_dims;  // [N, C, H, W]
  float epsilon = 1e-5f;
  float momentum = 0.9f;
  ActLayout layout = ActLayout::kNChw16c;  // of X and dX; not kPlain
  // Y (the forward) and dY (the backward) in `layout`, or plain NCHW: the
  // kernel then reorders them (Describe() says so).
  ActLayout y_layout = ActLayout::kPlain;
  bool fuse_relu = false;  // Y = relu(batch_norm(X)); dY is relu's dOut
};

// The bytes of the relu mask (the workspace) the kernels of `spec` bind: one
// bit per element of X's stored (padded) dims in `layout`, as oneDNN's jit
// batch norm writes it (a reference implementation would want a byte per
// element: the kernels check oneDNN's workspace against this bound when
// they are made, and BatchNormReluFits says beforehand).
int64_t BatchNormReluMaskBytes(ActLayout layout, const Dims& x_dims);
int64_t BatchNormReluMaskBytes(const BatchNormSpec& spec);
// Whether oneDNN fuses the relu into the batch norm of `spec` (fuse_relu set)
// with a workspace within BatchNormReluMaskBytes. Creates (and caches) the
// forward primitive, as the kernel will.
bool BatchNormReluFits(const BatchNormSpec& spec, const onednn::Settings& settings);

// Arguments at run time: X (kept), Scale, Bias, Mean, Variance -> Y,
// MeanOut, VarianceOut, SavedMean, SavedVariance[, relu mask]. MeanOut and
// VarianceOut may be Mean and Variance (read before written). Throws
// kiln::Error: kUnimplemented when oneDNN has no implementation or its
// workspace does not fit the mask.
std::shared_ptr<const runtime::Kernel> MakeBatchNormKernel(const BatchNormSpec& spec, const onednn::Settings& settings,
                                                           const std::string& name);

// Arguments at run time: X (kept), Scale, SavedMean, SavedVariance, dY[,
// relu mask] -> dX (kept)[, dScale][, dBias]. Throws as MakeBatchNormKernel.
std::shared_ptr<const runtime::Kernel> MakeBatchNormGradKernel(const BatchNormSpec& spec, bool want_dscale,
                                                               bool want_dbias, const onednn::Settings& settings,
                                                               const std::string& name);

}  // namespace kiln::jit
