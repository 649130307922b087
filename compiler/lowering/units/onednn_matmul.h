// A oneDNN matmul with its post-ops (matmul_epilogue), and the one matcher
// of the units that are or can become one (the bf16 steps rewrite them to
// bind bf16 buffers).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/kernels/onednn/onednn_kernels.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// Out = act(alpha * X W (+ bias)). Kernel args: X, W[, bias] -> Out.
class OneDnnMatmulUnit final : public Unit {
 public:
  struct Operands {
    // X and W: f32 vars, or their bf16 copies (bf16_activations,
    // bf16_weight_copies); W may be the old value of a weight (sgd_before_dx).
    DerivedBuffer x, w;
    std::string bias;  // a [N] row; "" when the product has none
    std::string out;
  };
  // `spec`'s x_dtype and w_dtype are those of the operands' buffers, and its
  // bias says whether there is one.
  OneDnnMatmulUnit(const std::string& step, std::vector<int> ops, const FusedMatmulSpec& spec, Operands operands);
  const char* kind() const override { return "onednn_matmul"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const FusedMatmulSpec& spec() const { return spec_; }
  const Operands& operands() const { return o_; }

 private:
  FusedMatmulSpec spec_;
  Operands o_;
};

// What a unit computes when it is a oneDNN matmul, or can run as one.
struct MatmulView {
  FusedMatmulSpec spec;
  OneDnnMatmulUnit::Operands operands;
};

// The spec and operands of a oneDNN matmul unit; or of the one a framework
// matmul variant becomes: the input-gradient-only matmul_grad that
// weight_grad_fold leaves, and sgd_before_dx's matmul reading the old W,
// both dX = dY W^T (no transposes, alpha 1, f32; computed in the cluster's
// amp compute type). Empty for any other unit.
std::optional<MatmulView> AsOneDnnMatmul(const Cluster& c, const Unit& unit);

}  // namespace kiln::jit
