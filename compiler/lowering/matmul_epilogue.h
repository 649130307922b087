// Lowering step: a matmul whose output only feeds a bias add of a [N] row
// (whose sum only feeds a relu or gelu) becomes one oneDNN matmul with bias
// and an eltwise post-op, so the intermediate values never exist.
#pragma once

#include "compiler/lowering/epilogue.h"
#include "compiler/lowering/trace.h"
#include "compiler/lowering/unit.h"
#include "compiler/kernels/onednn/onednn_kernels.h"

namespace kiln::jit {

class OneDnnMatmulUnit final : public Unit {
 public:
  // args: X, W[, bias], Out.
  OneDnnMatmulUnit(const std::string& step, std::vector<int> ops, const FusedMatmulSpec& spec,
                   std::vector<std::string> args);
  const char* kind() const override { return "onednn_matmul"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const FusedMatmulSpec& spec() const { return spec_; }
  const std::vector<std::string>& args() const { return args_; }

 private:
  FusedMatmulSpec spec_;
  std::vector<std::string> args_;
};

Units FuseMatmulEpilogue(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kMatmulEpilogueStep[] = "matmul_epilogue";

}  // namespace kiln::jit
