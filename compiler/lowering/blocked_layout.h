// Lowering step: a convolution whose bias-added, relu'd output is max-pooled
// (2x2, stride 2) keeps that output inside the cluster in the channel-blocked
// layout its oneDNN primitive writes (nChw16c with AVX-512, nChw8c with
// AVX2), and so does the backward pass through it:
//
//   conv2d + bias + relu  -> y          (onednn_conv, dst bound blocked)
//   pool2d(y)             -> p          (blocked_max_pool: blocked in, plain out)
//   pool2d_grad(y, p, dp) -> dy         (blocked_max_pool_grad: dy blocked)
//   relu_grad(dy, y)      -> ds         (blocked_ew: ds blocked)
//   elementwise_add_grad(ds), conv2d_grad(x, w, ds)
//                         -> dx, dw, db (onednn_conv_grad: ds bound blocked,
//                                        db from the weights' backward)
//
// Without it oneDNN reorders y out of its blocked dst and ds back into it,
// and the first layer's pooling and its gradient run on the plain layout.
// The pooled output p is written plain: the next conv's primitive reads the
// layout it picks for itself, from a plain tensor.
//
// Fires when every reader of y, dy and ds is in the pattern (none leaves the
// cluster), the forward primitive picks a blocked dst for the conv's shape,
// the relu gradient maps zeros to zeros (padded lanes stay zero), and
// nothing between the bias gradient and the conv gradient touches what
// moves.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/unit.h"

namespace kiln::jit {

Units KeepBlockedLayout(const Cluster& c, Units units, StepTrace& trace);

}  // namespace kiln::jit
