// Lowering step: a conv2d whose output only feeds a bias add of a [C_out]
// vector on the channel axis (and/or a relu or gelu of it) becomes one oneDNN
// convolution with bias and an eltwise post-op: one pass over the output
// instead of three, and no intermediate activations.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/unit.h"
#include "compiler/kernels/onednn/onednn_kernels.h"

namespace kiln::jit {

class OneDnnConvUnit final : public Unit {
 public:
  // args: Input, Filter[, bias], Output.
  OneDnnConvUnit(const std::string& step, std::vector<int> ops, const FusedConvSpec& spec,
                 std::vector<std::string> args);
  const char* kind() const override { return "onednn_conv"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const FusedConvSpec& spec() const { return spec_; }
  const std::vector<std::string>& args() const { return args_; }

 private:
  FusedConvSpec spec_;
  std::vector<std::string> args_;
};

Units FuseConvEpilogue(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kConvEpilogueStep[] = "conv_epilogue";

}  // namespace kiln::jit
