// The reference interpreter of EwProgram over an EwLayout: the oracle the
// generated elementwise kernels are tested against.
#pragma once

#include <vector>

#include "framework/ew/ew_layout.h"
#include "framework/ew/ew_program.h"

namespace kiln {

// The scalar oracle: runs the program at every iteration point in double
// precision (inputs widened from float). Outputs are assigned (reductions are
// summed from zero in double); output k must hold OutputExtent(k) elements.
// bf16 operands (EwElem::kBF16) are given widened: a bf16 input's array holds
// its values as floats, and a bf16 output receives its values rounded to bf16
// (FloatToBf16Bits of the float value), widened again. bool operands
// (EwElem::kBool) likewise: an input's array holds 0.0 or 1.0, an output
// receives 1.0 where the value is nonzero or NaN, else 0.0.
void RunReference(const EwProgram& program, const EwLayout& layout, const std::vector<const float*>& inputs,
                  const std::vector<double*>& outputs);
// The same in float arithmetic, one rounding per instruction (fma rounds once;
// exp/tanh/erf/erfc use the float libm; sigmoid computes 1/(1+exp(-x)) in float).
// Matches the generated code exactly for programs without transcendental ops
// or reductions.
void RunReferenceFloat(const EwProgram& program, const EwLayout& layout, const std::vector<const float*>& inputs,
                       const std::vector<float*>& outputs);


}  // namespace kiln
