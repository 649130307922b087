// Buffers the lowering derives from a cluster var: the value of a weight
// before its sgd step (sgd_before_dx), bf16 copies of a weight or of an
// activation (bf16_weight_copies, bf16_activations), an activation kept in
// the layout its convolution writes (blocked_layout). A unit's operands hold
// them as typed values and the steps pass them on as such: what a buffer is
// derived from, and how, is read off the value, never parsed back out of a
// var name. Name() is the one place that spells the name the program binds.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/lowering/cluster.h"
#include "framework/act_layout.h"
#include "framework/tensor.h"

namespace kiln::jit {

enum class DerivedKind : uint8_t {
  kNone,        // the var itself
  kOldValue,    // the var before a unit updates it in place: "<var>@OLD"
  kBf16Copy,    // the var rounded to bf16: "<var>@BF16"
  kKeptLayout,  // an [N,C,H,W] f32 var kept in `layout`: "<var>@nChw16c"
  // The mask of the relu oneDNN fuses into a batch norm that writes the
  // [N,C,H,W] f32 var in `layout` (blocked_batch_norm): "<var>@RELU_MASK",
  // a byte buffer (dtype bool) of one bit per element of the var's stored
  // dims in `layout` (BatchNormReluMaskBytes,
  // compiler/kernels/onednn/batch_norm_kernels.h).
  kReluMask,
  // Where each window of a 2x2 max pooling took its maximum
  // (blocked_layout; compiler/kernels/blocked_pool.h), a byte per element
  // of the var, the pooled output, grouped as the pooled activation is kept
  // (`layout`'s stored dims; dtype bool): "<var>@ARGMAX".
  kPoolArgmax,
};

// A buffer a unit binds: a var of the cluster (kNone; converts from the
// var's name), or a temp derived from one.
struct DerivedBuffer {
  DerivedBuffer() = default;
  DerivedBuffer(std::string v) : var(std::move(v)) {}  // NOLINT(google-explicit-constructor): the var itself
  DerivedBuffer(std::string v, DerivedKind k, ActLayout l, DataType d)
      : var(std::move(v)), kind(k), layout(l), dtype(d) {}

  std::string var;  // the cluster var it derives from
  DerivedKind kind = DerivedKind::kNone;
  ActLayout layout = ActLayout::kPlain;  // kKeptLayout: the layout kept
  // The element type it holds: f32, or bf16 (every kBf16Copy; a kept layout
  // stored in bf16). The name does not depend on it.
  DataType dtype = DataType::kFP32;

  bool derived() const { return kind != DerivedKind::kNone; }
  // The name of the buffer in the program: the var's, or the var's with a
  // suffix for what it derives ("@OLD", "@BF16", "@nChw16c", ...).
  std::string Name() const;
  // The desc of a derived buffer, a temp: the var's, renamed, not
  // persistable, in `dtype`; a kept layout with its stored dims.
  proto::VarDesc Desc(const Cluster& c) const;

  bool operator==(const DerivedBuffer& o) const {
    return var == o.var && kind == o.kind && layout == o.layout && dtype == o.dtype;
  }
  bool operator!=(const DerivedBuffer& o) const { return !(*this == o); }
};

inline DerivedBuffer OldValueOf(std::string var) {
  return {std::move(var), DerivedKind::kOldValue, ActLayout::kPlain, DataType::kFP32};
}
inline DerivedBuffer Bf16CopyOf(std::string var) {
  return {std::move(var), DerivedKind::kBf16Copy, ActLayout::kPlain, DataType::kBF16};
}
inline DerivedBuffer ReluMaskOf(std::string var, ActLayout layout) {
  return {std::move(var), DerivedKind::kReluMask, layout, DataType::kBOOL};
}
inline DerivedBuffer PoolArgmaxOf(std::string var, ActLayout layout) {
  return {std::move(var), DerivedKind::kPoolArgmax, layout, DataType::kBOOL};
}
inline DerivedBuffer KeptLayoutOf(std::string var, ActLayout layout, DataType dtype = DataType::kFP32) {
  return {std::move(var), DerivedKind::kKeptLayout, layout, dtype};
}

}  // namespace kiln::jit
