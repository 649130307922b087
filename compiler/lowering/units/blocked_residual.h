// The residual unit kinds of the blocked_batch_norm step
// (compiler/lowering/blocked_batch_norm.h): a block's relu(a + s) where the
// batch norm's output a is kept in its convolution's layout, and the
// gradient of that sum and relu writing a's gradient kept.
#pragma once

#include <string>
#include <vector>

#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// elementwise_add(a, s) and the relu after it: Out = relu(a + s), a kept,
// s and Out plain or kept in a's layout (kept_activations). Kernel args: a
// (kept), s -> Out.
class BlockedResidualUnit final : public Unit {
 public:
  struct Operands {
    DerivedBuffer a;  // KeptLayoutOf the batch norm's output
    DerivedBuffer s, out;  // plain, or KeptLayoutOf in a's layout
    Dims dims;  // [N,C,H,W]
  };
  BlockedResidualUnit(const std::string& step, std::vector<int> ops, Operands operands);
  const char* kind() const override { return "blocked_residual"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const Operands& operands() const { return o_; }

 private:
  Operands o_;
};

// relu_grad(Out, dOut) and elementwise_add_grad of the sum: da (kept) and
// ds (when wanted) both the relu's gradient; Out, dOut and ds plain or kept
// in da's layout (kept_activations). Kernel args: Out, dOut -> da (kept)[,
// ds].
class BlockedResidualGradUnit final : public Unit {
 public:
  struct Operands {
    DerivedBuffer out, dout;
    DerivedBuffer da;  // KeptLayoutOf the batch norm output's gradient
    DerivedBuffer ds;  // no var when not wanted
    Dims dims;         // [N,C,H,W]
  };
  BlockedResidualGradUnit(const std::string& step, std::vector<int> ops, Operands operands);
  const char* kind() const override { return "blocked_residual_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const Operands& operands() const { return o_; }

 private:
  Operands o_;
};

// sum(X[0], X[1], ...) of gradients kept in one layout (the gradient of an
// activation kept_activations keeps, summed over its readers) into Out kept
// in it: one flat pass over the stored elements, whose padded lanes stay
// zero. Kernel args: X... -> Out.
class KeptSumUnit final : public Unit {
 public:
  struct Operands {
    std::vector<DerivedBuffer> x;  // KeptLayoutOf each part, one layout
    DerivedBuffer out;             // KeptLayoutOf the sum, in that layout
    Dims dims;                     // [N,C,H,W]
  };
  KeptSumUnit(const std::string& step, std::vector<int> ops, Operands operands);
  const char* kind() const override { return "kept_sum"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  Operands o_;
};

}  // namespace kiln::jit
