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
#include "compiler/lowering/unit.h"

namespace kiln::jit {

// Args: forward Q, K, V -> Out, LSE; backward Q, K, V, Out, LSE, dOut ->
// the wanted ones of dQ, dK, dV (`grads` says which, in that order).
class FusedAttentionUnit final : public Unit {
 public:
  FusedAttentionUnit(const std::string& step, int op, std::vector<std::string> args, int num_inputs,
                     AttentionParams params, std::vector<bool> grads);
  const char* kind() const override { return "fused_attention"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  std::vector<std::string> args_;
  int num_inputs_;
  AttentionParams params_;
  std::vector<bool> grads_;  // empty for the forward
};

Units LowerFusedAttention(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kFusedAttentionStep[] = "fused_attention";

}  // namespace kiln::jit
