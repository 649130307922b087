// Helpers shared by the reference kernels of framework/ops.
#pragma once

#include <algorithm>
#include <string>
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

// An elementwise lowering's op view seen as the contexts shape helpers take
// (Attr, OpName, Fail), so the JIT computes an op's dims with the code its
// shape inference runs.
class EwOpContext {
 public:
  explicit EwOpContext(const EwOpView& v) : v_(v) {}
  template <typename T>
  const T& Attr(const std::string& name) const {
    return v_.Attr<T>(name);
  }
  std::string OpName() const { return "op '" + v_.op().type() + "'"; }
  template <typename... Args>
  [[noreturn]] void Fail(const Args&... args) const {
    ThrowInvalidArgument(OpName(), ": ", args...);
  }

 private:
  const EwOpView& v_;
};

// Allocates t's buffer (dtype T) and fills it with zeros.
template <typename T>
T* ZeroFill(Tensor* t) {
  T* p = t->mutable_data<T>();
  std::fill(p, p + t->numel(), T(0));
  return p;
}

}  // namespace kiln::ops
