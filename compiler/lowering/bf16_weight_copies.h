// Lowering step (--amp bf16): a weight that two or more of the cluster's bf16
// matmuls read (a layer's forward product and its input gradient, when the
// forward and backward passes share a cluster) is converted to bf16 once per
// launch, by a generated kernel right before its first reader, and those
// matmuls bind the copy as it is. Without it each one converts W in a
// oneDNN reorder of its own.
//
// The readers it rewrites: the matmul units of matmul_epilogue, and the
// input-gradient-only matmul_grad that weight_grad_fold leaves (which becomes
// dX = dY W^T on the copy). No unit between the copy and its last reader may
// write W (the sgd step comes after the input gradient), so every reader sees
// the value it read before.
#pragma once

#include <string>
#include <vector>

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// W -> its bf16 copy, one generated kernel (kernel args: W -> copy). It
// computes no op of the cluster: its ops are empty.
class Bf16WeightCopyUnit final : public Unit {
 public:
  struct Operands {
    std::string w;
  };
  // `reader_ops`: the ops of the units that read the copy (kept out of the
  // step when the copy cannot be compiled).
  Bf16WeightCopyUnit(const std::string& step, Operands operands, std::vector<int> reader_ops, int readers);
  const char* kind() const override { return "bf16_weight_copy"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const std::string& w() const { return o_.w; }
  DerivedBuffer copy() const { return Bf16CopyOf(o_.w); }
  std::vector<int> FallbackOps() const override { return reader_ops_; }

 private:
  Operands o_;
  std::vector<int> reader_ops_;
  int readers_;
};

Units CopyBf16Weights(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kBf16WeightCopiesStep[] = "bf16_weight_copies";

}  // namespace kiln::jit
