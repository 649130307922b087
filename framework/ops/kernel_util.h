// Helpers shared by the reference kernels of framework/ops.
#pragma once

#include <algorithm>
#include <string_view>

#include "framework/operator.h"

namespace kiln::ops {

// Shape-inference check that input `slot`[i] is FP32/FP64; returns its dtype.
inline DataType CheckFloatInput(const InferShapeContext& ctx, std::string_view slot, size_t i = 0) {
  const DataType dtype = ctx.InputDtype(slot, i);
  if (dtype != DataType::kFP32 && dtype != DataType::kFP64) {
    ctx.Fail("input ", slot, ": expected dtype f32 or f64, got ", DataTypeName(dtype));
  }
  return dtype;
}

// Fails unless input `slot` has dtype `want` (the dtype of `want_slot`).
inline void CheckSameDtype(const InferShapeContext& ctx, std::string_view slot, DataType want,
                           std::string_view want_slot) {
  const DataType dtype = ctx.InputDtype(slot);
  if (dtype != want) {
    ctx.Fail("input ", slot, ": expected dtype ", DataTypeName(want), " (as ", want_slot, "), got ",
             DataTypeName(dtype));
  }
}

// Allocates t's buffer (dtype T) and fills it with zeros.
template <typename T>
T* ZeroFill(Tensor* t) {
  T* p = t->mutable_data<T>();
  std::fill(p, p + t->numel(), T(0));
  return p;
}

}  // namespace kiln::ops
