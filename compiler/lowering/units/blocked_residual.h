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
// s and Out plain. Kernel args: a (kept), s -> Out.
class BlockedResidualUnit final : public Unit {
 public:
  struct Operands {
    DerivedBuffer a;  // KeptLayoutOf the batch norm's output
    std::string s, out;
    Dims dims;  // [N,C,H,W]
  };
  BlockedResidualUnit(const std::string& step, std::vector<int> ops, Operands operands);
  const char* kind() const override { return "blocked_residual"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  Operands o_;
};

// relu_grad(Out, dOut) and elementwise_add_grad of the sum: da (kept) and
// ds (plain, when wanted) both the relu's gradient. Kernel args: Out, dOut
// -> da (kept)[, ds].
class BlockedResidualGradUnit final : public Unit {
 public:
  struct Operands {
    std::string out, dout;
    DerivedBuffer da;  // KeptLayoutOf the batch norm output's gradient
    std::string ds;    // "" when not wanted
    Dims dims;         // [N,C,H,W]
  };
  BlockedResidualGradUnit(const std::string& step, std::vector<int> ops, Operands operands);
  const char* kind() const override { return "blocked_residual_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  Operands o_;
};

}  // namespace kiln::jit
