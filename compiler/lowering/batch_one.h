// Lowering step: with one row (batch 1), the matmuls of the earlier steps run
// as kiln matrix-vector kernels (compiler/kernels/gemv.h) instead of oneDNN, which
// would repack W for a single row: the forward matmul with bias and ReLU,
// and the weight-gradient fold together with dX in one pass over W.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// Out[1,N] = X[1,K] W[K,N] (+ bias) (relu). Kernel args: X, W[, bias] -> Out.
class GemvMatmulUnit final : public Unit {
 public:
  struct Operands {
    std::string x, w;
    std::string bias;  // a [N] row; "" when none
    std::string out;
  };
  GemvMatmulUnit(const std::string& step, std::vector<int> ops, int64_t k, int64_t n, bool relu, Operands operands);
  const char* kind() const override { return "gemv_matmul"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  int64_t k_, n_;
  bool relu_;
  Operands o_;
};

// dX = dY W^T (when wanted) and W -= lr X^T dY in one pass over W.
// Kernel args: X, dY, lr, W -> [dX,] W.
class GemvGradSgdUnit final : public Unit {
 public:
  struct Operands {
    std::string x, dy, lr, w;
    std::string dx;  // "" when not wanted
  };
  GemvGradSgdUnit(const std::string& step, std::vector<int> ops, Operands operands, int64_t k, int64_t n);
  const char* kind() const override { return "gemv_grad_sgd"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  Operands o_;
  int64_t k_, n_;
};

Units UseGemvAtBatchOne(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kBatchOneStep[] = "batch_one";

}  // namespace kiln::jit
