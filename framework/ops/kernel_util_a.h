// Helpers shared by the reference kernels of the elementwise, activation,
// reduce, fill and optimizer ops: dtype dispatch, shape-inference checks and
// the broadcast loop nest used both by elementwise broadcasting and by
// reductions (a reduction is a broadcast read backwards).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/operator.h"
#include "framework/ops/kernel_util.h"
#include "framework/shape_util.h"

namespace kiln::ops_a {

using ops::CheckFloatInput;
using ops::CheckSameDtype;
using ops::ZeroFill;

// Calls fn(T{}) with T = float or double after `dtype`; other dtypes fail
// naming the op and `what` (usually a slot).
template <typename Fn>
void DispatchFloat(const ExecContext& ctx, DataType dtype, std::string_view what, Fn&& fn) {
  if (dtype == DataType::kFP32) {
    fn(float{});
  } else if (dtype == DataType::kFP64) {
    fn(double{});
  } else {
    ctx.Fail(what, ": expected dtype f32 or f64, got ", DataTypeName(dtype));
  }
}

// Fails unless input `slot` has dims compatible with `want` (-1 matches anything).
inline void CheckSameDims(const InferShapeContext& ctx, std::string_view slot, const Dims& want,
                          std::string_view want_slot) {
  const Dims dims = ctx.InputDims(slot);
  if (!DimsCompatible(dims, want)) {
    ctx.Fail("input ", slot, ": expected dims ", DimsToString(want), " (as ", want_slot, "), got ", DimsToString(dims));
  }
}

// Slot definitions of grad ops: forward slots and out-grads are read, and every
// gradient output may be absent (@EMPTY@) when nobody needs it.
inline SlotDef Required(std::string name) { return SlotDef{std::move(name), false, false}; }
inline SlotDef Optional(std::string name) { return SlotDef{std::move(name), false, true}; }

// ---- Broadcast loop nest ------------------------------------------------------
// Visits every element of X (dims `x`) together with the element of Y it reads,
// where Y has dims `y_padded` (same rank as X, each dim equal to X's or 1).
// Dims of X that are 1 are dropped and adjacent dims that Y either follows or
// broadcasts along are merged, so the innermost loop is one contiguous run of
// X with Y's index moving by 1 or 0. The same nest serves reductions: the
// reduced tensor plays Y.
struct BroadcastLoops {
  std::vector<int64_t> sizes;      // collapsed extents, outermost first
  std::vector<int64_t> y_strides;  // Y's stride per collapsed loop (0: broadcast)
  int64_t x_numel = 0;
  int64_t y_numel = 0;
};

inline BroadcastLoops MakeBroadcastLoops(const Dims& x, const Dims& y_padded) {
  KILN_CHECK(x.size() == y_padded.size(), "broadcast rank mismatch");
  BroadcastLoops l;
  l.x_numel = Numel(x);
  l.y_numel = Numel(y_padded);
  std::vector<bool> follows;
  for (size_t d = 0; d < x.size(); ++d) {
    KILN_CHECK(y_padded[d] == x[d] || y_padded[d] == 1, "Y dim does not broadcast");
    if (x[d] == 1) continue;
    const bool f = y_padded[d] == x[d];
    if (!follows.empty() && follows.back() == f) {
      l.sizes.back() *= x[d];
    } else {
      l.sizes.push_back(x[d]);
      follows.push_back(f);
    }
  }
  if (l.sizes.empty()) {
    l.sizes.push_back(1);
    follows.push_back(true);
  }
  l.y_strides.assign(l.sizes.size(), 0);
  int64_t stride = 1;
  for (size_t k = l.sizes.size(); k-- > 0;) {
    if (!follows[k]) continue;
    l.y_strides[k] = stride;
    stride *= l.sizes[k];
  }
  return l;
}

// Calls fn(i, j) for every flat index i of X and the flat index j of Y it pairs with.
template <typename Fn>
void ForEachBroadcast(const BroadcastLoops& l, Fn&& fn) {
  if (l.x_numel == 0) return;
  const size_t r = l.sizes.size();
  const int64_t inner = l.sizes[r - 1];
  const int64_t step = l.y_strides[r - 1];
  const int64_t outer = l.x_numel / inner;
  std::vector<int64_t> idx(r, 0);
  int64_t i = 0;
  int64_t j = 0;
  for (int64_t o = 0; o < outer; ++o) {
    if (step == 0) {
      for (int64_t k = 0; k < inner; ++k) fn(i + k, j);
    } else {
      for (int64_t k = 0; k < inner; ++k) fn(i + k, j + k);
    }
    i += inner;
    // Odometer over the outer loops.
    for (size_t d = r - 1; d-- > 0;) {
      j += l.y_strides[d];
      if (++idx[d] < l.sizes[d]) break;
      j -= l.y_strides[d] * l.sizes[d];
      idx[d] = 0;
    }
  }
}

// Reads a one-element FP32/FP64 tensor as double (learning rate, beta powers).
inline double ReadScalar(const ExecContext& ctx, std::string_view slot) {
  const Tensor& t = ctx.Input(slot);
  if (t.numel() != 1) ctx.Fail("input ", slot, ": expected one element, got ", t.ShapeString());
  if (t.dtype() == DataType::kFP32) return t.data<float>()[0];
  if (t.dtype() == DataType::kFP64) return t.data<double>()[0];
  ctx.Fail("input ", slot, ": expected dtype f32 or f64, got ", DataTypeName(t.dtype()));
}

// Writes a one-element FP32/FP64 tensor, keeping its dtype.
inline void WriteScalar(Tensor* t, DataType dtype, double value) {
  if (dtype == DataType::kFP64) {
    t->mutable_data<double>()[0] = value;
  } else {
    t->mutable_data<float>()[0] = static_cast<float>(value);
  }
}

}  // namespace kiln::ops_a
