// The iteration layout of fused elementwise kernels: an iteration space of up
// to kEwMaxRank collapsed dims and strided operands (stride 0 = broadcast for
// an input, = sum reduction for an output). With an EwProgram (ew_program.h)
// it is what the JIT's code generator turns into machine code.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace kiln {

constexpr int kEwMaxRank = 4;

// Strides in elements, one per iteration dim (only the first `rank` are used).
// Input: stride 0 on a dim broadcasts the input along it. Output: stride 0 on a
// dim of size > 1 makes the output the SUM over that dim (a reduction output).
// The innermost stride is 0 or 1.
//
// Element type: kF32 operands hold floats; a kBF16 operand holds bf16 (the
// top halves of floats, framework/bf16.h): its loads widen exactly and its
// stores round to nearest even. A kBool operand holds one byte per element
// (a C++ bool, 0 or 1): its loads give 0.0 or 1.0 (any nonzero byte a
// nonzero float), and its stores write 1 where the value is nonzero or NaN
// (C++'s float-to-bool conversion), else 0. The program computes in f32
// either way, and a reduction output is always kF32 (its sums are kept in f32).
enum class EwElem : uint8_t { kF32, kBF16, kBool };
// Bytes per element: 4, 2, 1.
inline int64_t EwElemBytes(EwElem e) { return e == EwElem::kF32 ? 4 : e == EwElem::kBF16 ? 2 : 1; }
// "f32", "bf16", "bool".
const char* EwElemName(EwElem e);

struct EwOperand {
  std::array<int64_t, kEwMaxRank> strides{};
  EwElem elem = EwElem::kF32;
};
using EwInput = EwOperand;
using EwOutput = EwOperand;

// The iteration space (row-major, innermost dim last) and the operands.
struct EwLayout {
  int rank = 1;
  std::array<int64_t, kEwMaxRank> dims{{1, 1, 1, 1}};
  std::vector<EwInput> inputs;
  std::vector<EwOutput> outputs;

  int64_t numel() const;
  // True when output k has stride 0 on a dim of size > 1.
  bool IsReduction(int output) const;
  // True when output k is summed over the innermost dim (its inner stride is 0
  // and the inner dim has size > 1).
  bool IsInnerReduction(int output) const;
  // Elements an operand spans: 1 + sum over dims of (size-1)*stride; 0 when the
  // space is empty along a dim the operand is not broadcast/reduced over.
  int64_t InputExtent(int input) const;
  int64_t OutputExtent(int output) const;
  // "dims=[64,512] in0=[512,1] in1=[0,1] out0=[0,1]+ out1=[512,1]:bf16"; "+"
  // marks reductions, ":bf16" and ":bool" the operands that are not f32.
  std::string ToString() const;
  // Throws kiln::Error (InvalidArgument) naming the bad field.
  void Validate() const;
};

// Builds the collapsed layout of an elementwise group. iter_dims are the
// iteration (= largest operand) dims; each operand's dims are padded with 1s to
// the same rank (Y of elementwise_* per OPS.md: see BroadcastYDims), each dim
// equal to the iteration dim or 1 (1 = broadcast input / reduced output).
// Dims of size 1 are dropped and adjacent dims with the same broadcast pattern
// across all operands are merged. Throws kiln::Error with code kUnimplemented
// when more than kEwMaxRank dims remain (the lowering then splits the group),
// and InvalidArgument when an operand does not fit the iteration dims.
EwLayout CollapseLayout(const Dims& iter_dims, const std::vector<Dims>& input_dims,
                        const std::vector<Dims>& output_dims);

// CollapseLayout's merge as data, to lay out other sizes the same way (a
// kernel resized to new sizes keeps the loops it was generated with).
struct EwCollapse {
  int rank = 0;             // layout dims; 0: one point (rank 1, dims [1])
  std::vector<int> dim_of;  // per iteration dim: its layout dim, -1 when dropped (size 1)
  // Per operand (inputs, then outputs), per layout dim: its dims are the
  // iteration dims there (a nonzero stride), not 1s (broadcast / summed).
  std::vector<std::vector<bool>> walks;
};
// The merge CollapseLayout makes of these dims (it throws as CollapseLayout).
EwCollapse CollapseOf(const Dims& iter_dims, const std::vector<Dims>& input_dims,
                      const std::vector<Dims>& output_dims);
// The layout of (other) dims under `c`: each layout dim the product of its
// iteration dims, an operand's stride on it the product of the operand's
// dims after them where it walks it, else 0. CollapseLayout(i, in, out) is
// ApplyCollapse(CollapseOf(i, in, out), i, in, out). False, with the reason
// in `why`, when the dims do not fit `c`: other ranks or operand counts, a
// dropped dim that is not 1 now, an operand not 1 on a dim it did not walk
// or not the iteration dim on one it walked.
bool ApplyCollapse(const EwCollapse& c, const Dims& iter_dims, const std::vector<Dims>& input_dims,
                   const std::vector<Dims>& output_dims, EwLayout* layout, std::string* why);
}  // namespace kiln
