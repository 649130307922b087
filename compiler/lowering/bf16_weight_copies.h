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

#include "compiler/lowering/trace.h"
#include "compiler/lowering/unit.h"
#include "compiler/kernels/onednn/onednn_kernels.h"

namespace kiln::jit {

// W -> its bf16 copy, one generated kernel (args: W -> copy). It computes no
// op of the cluster: its ops are empty.
class Bf16WeightCopyUnit final : public Unit {
 public:
  // `reader_ops`: the ops of the units that read the copy (kept out of the
  // step when the copy cannot be compiled).
  Bf16WeightCopyUnit(const std::string& step, std::string w, std::vector<int> reader_ops, int readers);
  const char* kind() const override { return "bf16_weight_copy"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const std::string& w() const { return w_; }
  // "<W>@BF16".
  const std::string& copy() const { return copy_; }
  std::vector<int> FallbackOps() const override { return reader_ops_; }

 private:
  std::string w_, copy_;
  std::vector<int> reader_ops_;
  int readers_;
};

Units CopyBf16Weights(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kBf16WeightCopiesStep[] = "bf16_weight_copies";

// The spec and args (X, W[, bias], Out) of a oneDNN matmul unit, or of the
// one that the input-gradient-only matmul_grad weight_grad_fold leaves
// becomes (dX = dY W^T, no transposes, alpha 1, f32; computed in the
// cluster's amp compute type). False for any other unit.
bool AsMatmulUnit(const Cluster& c, const Unit& unit, FusedMatmulSpec* spec, std::vector<std::string>* args);

}  // namespace kiln::jit
