// W -= lr * X^T dY through oneDNN (a sum post-op into W): the weight gradient
// of a matmul and its sgd step in one primitive (weight_grad_fold), run
// before dX when it keeps the old W (sgd_before_dx), with a bf16 dY
// (bf16_activations).
#pragma once

#include <string>
#include <vector>

#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// Kernel args: X, dY, lr, W -> W; with keep_old, X, dY, lr, W -> W_old, W
// (W_old receives W before the step, for a dX computed after it).
class MatmulSgdUnit final : public Unit {
 public:
  struct Operands {
    std::string x;
    // An f32 var, or its bf16 copy (bf16_activations), bound as it is.
    DerivedBuffer dy;
    std::string lr, w;
    Dims x_dims, w_dims;
    // The input gradient the grad op also computes (by the unit right before
    // this one), or "" when it is not wanted.
    std::string dx;
  };
  MatmulSgdUnit(const std::string& step, std::vector<int> ops, Operands operands, bool keep_old = false);
  const char* kind() const override { return "matmul_sgd"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const Operands& operands() const { return o_; }
  bool keep_old() const { return keep_old_; }
  // The buffer that holds W before the step (keep_old).
  DerivedBuffer old_w() const { return OldValueOf(o_.w); }

 private:
  Operands o_;
  bool keep_old_;
};

}  // namespace kiln::jit
