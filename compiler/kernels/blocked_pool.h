// 2x2, stride-2, unpadded max pooling and its gradient where the pooled
// activation is kept in channel groups of b: [N, ceil(C/b), H, W, b],
// channel c at group c/b, lane c%b, the lanes past C zero. That is oneDNN's
// nChw8c / nChw16c with b = 8 / 16, and nhwc with b = C
// (framework/act_layout.h; compiler/lowering/blocked_layout.h keeps a
// conv's output so).
#pragma once

#include <cstdint>

namespace kiln::jit {

// out [N, C, H/2, W/2] (plain NCHW): the maximum of each window of x
// (grouped); NaN when the window holds one, as kiln's pool2d. argmax (a byte
// per window, grouped as x: [N, ceil(C/b), H/2, W/2, b], the padded lanes'
// codes included) gets where the gradient goes: the first element of the
// window (row-major, 0..3) equal to its maximum, 3 when none is (a NaN
// maximum), plus 4 when that element is > 0. The gradient then needs
// neither x nor out.
void MaxPool2x2BlockedToPlain(const float* x, float* out, uint8_t* argmax, int64_t n, int64_t c, int64_t h, int64_t w,
                              int64_t b);

// What the pooling gradient kernel also computes: nothing, or the gradient
// of the relu that made x (x > 0 ? d : 0; x is relu's Out).
enum class PoolGradThen { kNothing, kReluGrad };

// How the pooling gradient's dout is stored: plain [N, C, H/2, W/2], or
// grouped as dx ([N, ceil(C/b), H/2, W/2, b]; its padded lanes are not used).
enum class PooledGradLayout { kPlain, kGrouped };

// The gradient of that pooling: dx (grouped, padded lanes zero) gets, in
// each window, dout at the element argmax names and 0 elsewhere (as
// compiler/kernels/gemv.h's MaxPool2x2Grad does for plain tensors: the first
// maximum, or the window's last element for a NaN maximum); then `then`.
// argmax is grouped (as MaxPool2x2BlockedToPlain writes it), dout in
// `dout_layout`.
void MaxPool2x2GradPlainToBlocked(const uint8_t* argmax, const float* dout, float* dx, int64_t n, int64_t c,
                                  int64_t h, int64_t w, int64_t b, PoolGradThen then = PoolGradThen::kNothing,
                                  PooledGradLayout dout_layout = PooledGradLayout::kPlain);
// The same with dx stored in bf16 (round to nearest even, as
// framework/bf16.h; vcvtneps2bf16 where the CPU has AVX512_BF16). When
// `dbias` is given it receives, for each of the C channels, the f32 sum of
// dx over N, H and W before the rounding (a bias gradient), summed per
// (image, channel group) in row order and then over the images in order, so
// the result does not depend on the thread count.
void MaxPool2x2GradPlainToBlockedBf16(const uint8_t* argmax, const float* dout, uint16_t* dx, int64_t n, int64_t c,
                                      int64_t h, int64_t w, int64_t b, PoolGradThen then, float* dbias = nullptr,
                                      PooledGradLayout dout_layout = PooledGradLayout::kPlain);

}  // namespace kiln::jit
