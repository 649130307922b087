// Lowering step: a convolution whose bias-added, relu'd output is max-pooled
// (2x2, stride 2) keeps that output inside the cluster in the layout its
// oneDNN primitive writes (framework/act_layout.h: channel-blocked nChw16c
// with AVX-512, nChw8c with AVX2; channels-last nhwc, as the bf16 AMX
// kernels write), and so does the backward pass through it:
//
//   conv2d + bias + relu  -> y          (onednn_conv, dst bound kept)
//   pool2d(y)             -> p          (blocked_max_pool: kept in, plain out)
//   pool2d_grad(y, p, dp), relu_grad(dy, y)
//                         -> ds         (blocked_max_pool_grad: one kernel,
//                                        dy never stored, ds kept)
//   elementwise_add_grad(ds), conv2d_grad(x, w, ds)
//                         -> dx, dw, db (onednn_conv_grad: ds bound kept,
//                                        db from the weights' backward)
//
// Without it oneDNN reorders y out of its dst layout and ds back into it,
// and the pooling and its gradient run on the plain layout.
// The pooled output p is written plain: the next conv's primitive reads the
// layout it picks for itself, from a plain tensor.
//
// Then p's gradient dp: when the next conv's data gradient alone writes it,
// the pooling gradient alone reads it, and that gradient picks the chain's
// layout for it by itself, dp is kept in that layout too (the conv's
// primitive would otherwise reorder it out to plain and the pooling gradient
// gather it back into groups).
//
// Fires when every reader of y, dy, ds and dz is in the pattern (none leaves
// the cluster), the forward primitive picks a layout it can keep for the conv's
// shape, and nothing between the moved ops (relu_grad up, the bias
// gradient down) touches what they read or write.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units KeepBlockedLayout(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kBlockedLayoutStep[] = "blocked_layout";

}  // namespace kiln::jit
