// Lowering step: a convolution (without bias, or with the bias
// conv_epilogue fused; its elementwise_add_grad then moves into the conv
// gradient's weights pass) whose output is batch-normalised (training)
// keeps that output, and the gradient flowing back into the
// convolution, in the layout its oneDNN primitive writes
// (framework/act_layout.h: nChw16c, nChw8c or nhwc), and runs the batch
// norm and its gradient as oneDNN primitives in that layout; a relu that is
// the batch norm's only reader is fused into it (fuse_norm_relu: a relu mask
// replaces relu's output in the backward):
//
//   conv2d(x, w)                -> y        (onednn_conv, dst bound kept)
//   batch_norm(y) [+ relu]      -> z or r   (onednn_batch_norm: y kept;
//                                            z/r reordered to plain, the
//                                            mask kept)
//   [relu_grad(r, dr)], batch_norm_grad(y, dz or dr)
//                               -> dy, ds, db (onednn_batch_norm_grad: dz/dr
//                                            reordered in, dy kept)
//   conv2d_grad(x, w, dy)       -> dx, dw   (onednn_conv_grad: dy bound kept)
//
// Without it the convolution reorders y out of its layout and dy back into
// it, and the batch norm runs on plain NCHW. The reorders left (z or r out,
// dz or dr in, at the edge of the chain) are named by the kernels' dump
// lines.
//
// When the batch norm (without relu) feeds a resnet block's residual sum
// alone, relu(z + s) with s plain, z and dz stay kept as well: a kiln kernel
// sums z and s and applies the relu into the plain output, and one more
// takes relu_grad and elementwise_add_grad into the kept dz and the plain
// gradient of s (blocked_residual units), so no reorder is left there.
//
// Fires when y and dy have no reader outside the pattern (neither leaves the
// cluster), the batch norm is in training mode on f32 [N,C,H,W] with its
// saved statistics read by its gradient, compute is f32, and oneDNN's
// forward convolution picks a layout the cluster can keep. The relu is fused
// when it alone reads z, relu_grad alone writes dz and only the gradient
// reads dz, and nothing between the moved ops touches what they read or
// write.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units KeepBatchNormBlocked(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kBlockedBatchNormStep[] = "blocked_batch_norm";

}  // namespace kiln::jit
