// The residual sum of a resnet block, relu(a + s), and its gradient, where
// `a` (the batch norm's output) and its gradient are kept in channel groups
// of b: [N, ceil(C/b), H, W, b], channel c at group c/b, lane c%b, the lanes
// past C zero (framework/act_layout.h: nChw8c / nChw16c with b = 8 / 16,
// nhwc with b = C); the shortcut s, the sum's relu'd output and the
// shortcut's gradient are plain NCHW. One pass each: the reorder of a (of
// its gradient) is the sum's (the gradient's) own loop.
#pragma once

#include <cstdint>

namespace kiln::jit {

// out = relu(a + s), as kiln's elementwise_add then relu (NaN stays NaN).
void ResidualAddReluBlocked(const float* a, const float* s, float* out, int64_t n, int64_t c, int64_t hw, int64_t b);

// d = out > 0 ? dout : 0 (relu's gradient on its Out), then the gradient of
// the sum: da = d (grouped, padded lanes zero) and ds = d (plain; skipped
// when null).
void ResidualAddReluGradBlocked(const float* out, const float* dout, float* da, float* ds, int64_t n, int64_t c,
                                int64_t hw, int64_t b);

// Where each operand of the two functions below is stored: grouped as `a`
// (and `da`), or plain NCHW.
struct ResidualLayouts {
  bool s = false, out = false;    // the forward's
  bool dout = false, ds = false;  // the gradient's (out: Out, which it reads)
};

// ResidualAddReluBlocked with s and out grouped or plain as `grouped` says;
// a grouped out gets zeros in its padded lanes. (With every operand grouped
// the lowering emits a generated kernel instead: one flat pass.)
void ResidualAddRelu(const float* a, const float* s, float* out, int64_t n, int64_t c, int64_t hw, int64_t b,
                     const ResidualLayouts& grouped);
// ResidualAddReluGradBlocked with Out, dOut and ds grouped or plain.
void ResidualAddReluGrad(const float* out, const float* dout, float* da, float* ds, int64_t n, int64_t c, int64_t hw,
                         int64_t b, const ResidualLayouts& grouped);

}  // namespace kiln::jit
