// Lowering step: a matmul_grad whose weight gradient is read only by the sgd
// step of that weight becomes one oneDNN matmul, W -= lr * X^T dY, run right
// after the input gradient (so X and dY die there, not at the end of the
// backward pass); the weight gradient never exists.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/unit.h"

namespace kiln::jit {

// W -= lr * X^T dY through oneDNN (a sum post-op into W). Args: X, dY, lr, W
// -> W; with keep_old, X, dY, lr, W -> W_old, W (W_old receives W before the
// step, for a dX computed after it).
class MatmulSgdUnit final : public Unit {
 public:
  struct Operands {
    std::string x, dy, lr, w;
    Dims x_dims, w_dims;
    // The input gradient the grad op also computes (by the unit right before
    // this one), or "" when it is not wanted.
    std::string dx;
    // kBF16: dy is a bf16 buffer (bf16_activations), bound as it is.
    DataType dy_dtype = DataType::kFP32;
  };
  MatmulSgdUnit(const std::string& step, std::vector<int> ops, Operands operands, bool keep_old = false);
  const char* kind() const override { return "matmul_sgd"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const Operands& operands() const { return o_; }
  bool keep_old() const { return keep_old_; }
  // The var that holds W before the step (keep_old): "<W>@OLD".
  std::string old_w() const { return o_.w + "@OLD"; }

 private:
  Operands o_;
  bool keep_old_;
};

Units FoldWeightGradIntoSgd(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kWeightGradFoldStep[] = "weight_grad_fold";

}  // namespace kiln::jit
