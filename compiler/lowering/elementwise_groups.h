// Lowering step: the elementwise fragments of the ops no earlier step took
// (their registry entries' EwProgram meaning: activations, binary ops with
// broadcasts, their grads, optimizer updates) are grouped by iteration space
// into one generated kernel per group. A fragment joins the first group with
// its space that it can move up to without breaking a dependency; values
// that stay inside a group live in registers.
#pragma once

#include <map>
#include <set>

#include "compiler/lowering/trace.h"
#include "compiler/lowering/unit.h"

namespace kiln::jit {

class EwGroupUnit final : public Unit {
 public:
  EwGroupUnit(const std::string& step, Dims iter);
  const char* kind() const override { return "ew_group"; }
  const Dims& iter() const { return iter_; }
  // True when the group holds the latest value of `var` over its whole space
  // (a later fragment reads it from a register).
  bool HoldsFull(const std::string& var) const { return full_defined_.count(var) > 0; }
  // Whether adding `fragment` keeps the kernel within kMaxEwOperands
  // inputs (distinct var and dims read) and outputs (vars written).
  bool Fits(const EwFragment& fragment) const;
  void Add(int op, const EwFragment& fragment);
  // The group stores `var` (which it holds full) only as bf16, into
  // "<var>@BF16" (bf16_activations: every reader is a bf16 matmul).
  void StoreAsBf16(const std::string& var);
  std::string Describe(const Cluster& c) const override;
  // One generated kernel (compiler/codegen/ew_codegen.h); throws when the group
  // cannot be laid out or does not fit the registers.
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;

 private:
  struct Piece {
    int op;
    EwFragment fragment;
  };
  Dims iter_;
  std::vector<Piece> pieces_;
  std::map<std::string, Dims> full_defined_;
  std::set<std::pair<std::string, Dims>> loads_;  // every access read, an upper bound of the kernel's inputs
  std::set<std::string> bf16_;                     // vars stored as "<var>@BF16" in bf16
};

Units GroupElementwise(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kElementwiseGroupsStep[] = "elementwise_groups";

}  // namespace kiln::jit
