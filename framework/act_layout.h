// The layouts a compiled cluster keeps a 4-D [N,C,H,W] activation in between
// its kernels (compiler/lowering/blocked_layout.h): plain NCHW, oneDNN's
// channel-blocked nChw8c / nChw16c ([N, ceil(C/b), H, W, b], channel c at
// block c/b and lane c%b, the lanes past C zero), or channels-last nhwc.
#pragma once

#include <cstdint>

#include "framework/tensor.h"

namespace kiln {

enum class ActLayout : uint8_t { kPlain, kNChw8c, kNChw16c, kNhwc };

inline const char* ActLayoutName(ActLayout layout) {
  switch (layout) {
    case ActLayout::kPlain: return "nchw";
    case ActLayout::kNChw8c: return "nChw8c";
    case ActLayout::kNChw16c: return "nChw16c";
    case ActLayout::kNhwc: return "nhwc";
  }
  return "?";
}

// The channels of one group in memory: the buffer is [N, ceil(C/g), H, W, g]
// for every kept layout (nhwc is one group of all C channels); 0 for plain.
inline int64_t ActChannelGroup(ActLayout layout, int64_t channels) {
  switch (layout) {
    case ActLayout::kNChw8c: return 8;
    case ActLayout::kNChw16c: return 16;
    case ActLayout::kNhwc: return channels;
    case ActLayout::kPlain: break;
  }
  return 0;
}

// The dims of the buffer holding an [N,C,H,W] activation in `layout`.
inline Dims ActStoredDims(ActLayout layout, const Dims& nchw) {
  const int64_t g = ActChannelGroup(layout, nchw[1]);
  if (g == 0) return nchw;
  if (layout == ActLayout::kNhwc) return {nchw[0], nchw[2], nchw[3], nchw[1]};
  return {nchw[0], (nchw[1] + g - 1) / g, nchw[2], nchw[3], g};
}

}  // namespace kiln
