// Lowering step: reshape2 and transpose2 (and their grads) never run the
// reference kernel inside a cluster. A reshape is a view: its output is its
// input's memory seen with other dims (the buffer plan aliases the two). A
// transpose is a generated copy over strided operands.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// Kernel args: In -> Out, a view (EmittedKernel::views).
class ReshapeViewUnit final : public Unit {
 public:
  struct Operands {
    std::string in, out;
  };
  ReshapeViewUnit(const std::string& step, int op, Operands operands);
  const char* kind() const override { return "reshape_view"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  Operands o_;
};

// Kernel args: In -> Out; Out dim i is In dim perm[i].
class TransposeCopyUnit final : public Unit {
 public:
  struct Operands {
    std::string in, out;
  };
  TransposeCopyUnit(const std::string& step, int op, Operands operands, std::vector<int64_t> perm);
  const char* kind() const override { return "transpose_copy"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  Operands o_;
  std::vector<int64_t> perm_;
};

Units LowerLayoutOps(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kLayoutOpsStep[] = "layout_ops";

}  // namespace kiln::jit
