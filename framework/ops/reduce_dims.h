// Which dims a reduction (reduce_sum, reduce_mean, reduce_max, reduce_min)
// folds and the shapes that follow, from the attrs they share: dim (negative
// counts from the end), keep_dim, reduce_all.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/shape_util.h"

namespace kiln::ops {

// Which dims of an input of rank `rank` are reduced (attrs dim, reduce_all).
// An empty `dim` list reduces every dim. `Ctx` is any context with Attr<T>,
// OpName and Fail (shape inference, kernels, the JIT's op views).
template <typename Ctx>
std::vector<bool> ReducedDims(const Ctx& ctx, size_t rank) {
  std::vector<bool> reduced(rank, false);
  const auto& dims = ctx.template Attr<std::vector<int64_t>>("dim");
  if (ctx.template Attr<bool>("reduce_all") || dims.empty()) {
    reduced.assign(rank, true);
    return reduced;
  }
  for (int64_t d : dims) {
    const int64_t a = NormalizeAxis(d, rank, ctx.OpName() + ": attribute dim");
    if (reduced[a]) ctx.Fail("attribute dim names dim ", a, " twice");
    reduced[a] = true;
  }
  return reduced;
}

// X's dims with 1 in every reduced dim (the reduced tensor at X's rank).
inline Dims KeptDims(const Dims& x, const std::vector<bool>& reduced) {
  Dims out = x;
  for (size_t d = 0; d < x.size(); ++d) {
    if (reduced[d]) out[d] = 1;
  }
  return out;
}

// Out's dims: reduced dims become 1 (keep_dim) or vanish; nothing left -> [1].
// Its elements are in the order of KeptDims' (only size-1 dims differ).
inline Dims ReduceOutDims(const Dims& x, const std::vector<bool>& reduced, bool keep_dim) {
  Dims out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(x[d]);
    } else if (keep_dim) {
      out.push_back(1);
    }
  }
  if (out.empty()) out.push_back(1);
  return out;
}

}  // namespace kiln::ops
