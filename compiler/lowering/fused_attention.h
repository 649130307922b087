// Lowering step: fused_attention and fused_attention_grad with f32 args
// become kiln's tiled attention kernels (compiler/kernels/attention/attention_kernels.h, on
// the options' ISA) instead of their reference kernels. The grad needs
// Out@GRAD and at least one of Q@GRAD, K@GRAD, V@GRAD; otherwise (and for
// other dtypes) the op is left to the framework fallback.
#pragma once

#include <string>
#include <vector>

#include "compiler/kernels/attention/attention_kernels.h"
#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// Kernel args: forward Q, K, V -> Out, LSE; backward Q, K, V, Out, LSE,
// dOut -> the wanted ones of dQ, dK, dV, in that order.
class FusedAttentionUnit final : public Unit {
 public:
  struct Operands {
    std::string q, k, v;
    std::string out, lse;  // written by the forward, read by the backward
    // The backward's: dOut, and the gradients wanted ("" for the others).
    // dout is "" for the forward.
    std::string dout, dq, dk, dv;
    bool backward() const { return !dout.empty(); }
  };
  FusedAttentionUnit(const std::string& step, int op, Operands operands, AttentionParams params);
  const char* kind() const override { return "fused_attention"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  Operands o_;
  AttentionParams params_;
};

Units LowerFusedAttention(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kFusedAttentionStep[] = "fused_attention";

}  // namespace kiln::jit
