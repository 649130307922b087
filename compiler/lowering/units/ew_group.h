// A generated elementwise kernel (compiler/codegen/ew_codegen.h) over one
// iteration space: the fragments elementwise_groups puts together, some of
// whose values bf16_activations has it store in bf16 alone.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/codegen/ew_runtime_kernel.h"
#include "compiler/lowering/units/unit.h"

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
  // Bf16CopyOf(var) (bf16_activations: every reader is a bf16 matmul).
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
  // How the kernel's layout follows new sizes of its vars (var_dims: the
  // compile-time dims of its inputs', then outputs' buffers).
  EwLayoutOf LayoutOf(const std::vector<Dims>& in_dims, const std::vector<Dims>& out_dims,
                      std::vector<Dims> var_dims) const;
  Dims iter_;
  std::vector<Piece> pieces_;
  std::map<std::string, Dims> full_defined_;
  std::set<std::pair<std::string, Dims>> loads_;  // every access read, an upper bound of the kernel's inputs
  std::set<std::string> bf16_;                     // vars stored as their Bf16CopyOf alone
};

}  // namespace kiln::jit
