// A oneDNN convolution with its post-ops (conv_epilogue), its output bound in
// the layout the primitive writes when blocked_layout keeps it so.
#pragma once

#include <string>
#include <vector>

#include "compiler/kernels/onednn/onednn_kernels.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// Output = act(conv(Input, Filter) (+ bias)). Kernel args: Input, Filter[,
// bias] -> Output.
class OneDnnConvUnit final : public Unit {
 public:
  struct Operands {
    // A var, or the var kept in spec.src_layout (a batch norm's output).
    DerivedBuffer input;
    std::string filter;
    std::string bias;  // a [C_out] vector; "" when none
    // A var, or the var kept in spec.dst_layout (KeptLayoutOf).
    DerivedBuffer out;
  };
  // `spec`'s bias says whether there is one; its dst_layout is out's, its
  // src_layout input's.
  OneDnnConvUnit(const std::string& step, std::vector<int> ops, const FusedConvSpec& spec, Operands operands);
  const char* kind() const override { return "onednn_conv"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const FusedConvSpec& spec() const { return spec_; }
  const Operands& operands() const { return o_; }

 private:
  FusedConvSpec spec_;
  Operands o_;
};

}  // namespace kiln::jit
