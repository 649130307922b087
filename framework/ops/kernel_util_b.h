// Small helpers shared by the reference kernels of matmul, conv/pool,
// norm/softmax and shape ops: dtype dispatch, shape checks, zero filling.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "framework/operator.h"
#include "framework/ops/kernel_util.h"
#include "framework/shape_util.h"

namespace kiln::ops_b {

using ops::CheckFloatInput;
using ops::CheckSameDtype;
using ops::ZeroFill;

// Calls fn(T{}) with T = float or double after the dtype of `slot`'s first
// input; other dtypes fail naming the op and the slot.
template <typename Fn>
void DispatchFloat(const ExecContext& ctx, std::string_view slot, Fn&& fn) {
  const DataType dtype = ctx.Input(slot).dtype();
  if (dtype == DataType::kFP32) {
    fn(float{});
  } else if (dtype == DataType::kFP64) {
    fn(double{});
  } else {
    ctx.Fail("input ", slot, ": expected dtype f32 or f64, got ", DataTypeName(dtype));
  }
}

// Sets output `out_slot` to the dims and dtype of input `in_slot` when present.
// "X[2]": an arg of a duplicable slot, for messages.
inline std::string ArgLabel(const std::string& slot, size_t k) { return slot + "[" + std::to_string(k) + "]"; }

// Fails unless input `slot`[k] has dtype `want` (the dtype of `want_slot`):
// grads that copy bytes (concat, split, slice) would misread an out-grad of
// another dtype.
inline void CheckDtype(const InferShapeContext& ctx, const std::string& slot, size_t k, DataType want,
                       const char* want_slot) {
  const DataType got = ctx.InputDtype(slot, k);
  if (got != want) {
    ctx.Fail("input ", ctx.InputCount(slot) > 1 ? ArgLabel(slot, k) : slot, ": expected dtype ", DataTypeName(want),
             " (as ", want_slot, "), got ", DataTypeName(got));
  }
}

inline void SetLike(InferShapeContext& ctx, std::string_view out_slot, std::string_view in_slot) {
  if (!ctx.HasOutput(out_slot)) return;
  ctx.SetOutput(out_slot, ctx.InputDims(in_slot), ctx.InputDtype(in_slot));
}

// Product of dims[begin, end); -1 when any of them is unknown.
inline int64_t ProdOrUnknown(const Dims& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) {
    if (dims[i] < 0) return -1;
    p *= dims[i];
  }
  return p;
}

// Output positions o in [lo, hi) for which o*stride + offset lies in [0, size).
struct Range {
  int64_t lo, hi;
};
inline Range ValidRange(int64_t out_size, int64_t in_size, int64_t stride, int64_t offset) {
  const int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = in_size - 1 - offset;
  const int64_t hi = last < 0 ? 0 : std::min(out_size, last / stride + 1);
  return {std::min(lo, hi), hi};
}

}  // namespace kiln::ops_b
