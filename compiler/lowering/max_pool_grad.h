// Lowering step: the gradient of 2x2, stride-2, unpadded max pooling becomes
// a kiln kernel (compiler/kernels/gemv.h's MaxPool2x2Grad: the first maximum of each
// window gets dOut) instead of oneDNN's backward, which needs the forward's
// workspace and so recomputes the forward (it ran in another cluster).
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/unit.h"

namespace kiln::jit {

// Args: X, Out, dOut -> dX.
class MaxPoolGradUnit final : public Unit {
 public:
  MaxPoolGradUnit(const std::string& step, int op, std::vector<std::string> args, Dims x_dims);
  const char* kind() const override { return "max_pool_grad"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  // X, Out, dOut, dX.
  const std::vector<std::string>& args() const { return args_; }

 private:
  std::vector<std::string> args_;
  Dims x_dims_;
};

// pool2d or pool2d_grad op `i` is the pooling this step's kernel takes:
// f32, max, 2x2 window, stride 2, no padding, not global, even H and W.
bool IsMaxPool2x2(const Cluster& c, int i);

Units LowerMaxPoolGrad(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kMaxPoolGradStep[] = "max_pool_grad";

}  // namespace kiln::jit
