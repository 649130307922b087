// The gradient of 2x2, stride-2, unpadded max pooling as a kiln kernel
// (compiler/kernels/gemv.h's MaxPool2x2Grad) on plain buffers (max_pool_grad),
// and the test of the pooling that kernel (and blocked_layout's) takes.
#pragma once

#include <string>

#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// Kernel args: X, Out, dOut -> dX.
class MaxPoolGradUnit final : public Unit {
 public:
  struct Operands {
    std::string x, out, dout, dx;
    Dims x_dims;
  };
  MaxPoolGradUnit(const std::string& step, int op, Operands operands);
  const char* kind() const override { return "max_pool_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const Operands& operands() const { return o_; }

 private:
  Operands o_;
};

// pool2d or pool2d_grad op `i` is the pooling the 2x2 kernels take: f32,
// max, 2x2 window, stride 2, no padding, not global, even H and W.
bool IsMaxPool2x2(const Cluster& c, int i);

}  // namespace kiln::jit
