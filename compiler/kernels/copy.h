// Kernels that move elements without computing: reshape views and transpose
// copies of the JIT's layout step (compiler/lowering/layout_ops.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/isa.h"
#include "framework/data_type.h"
#include "framework/tensor.h"
#include "runtime/program.h"

namespace kiln::jit {

// Out is In's memory seen with other dims (a reshape). Args: In -> Out. The
// buffer plan usually gives both one memory (BufferInfo::view_of) and the
// kernel does nothing; when it could not (both are the cluster's own inputs
// and outputs, or the executor launch mode), it copies Out's bytes as bound
// (ReadsDimsAtRunTime: it serves every size).
std::shared_ptr<const runtime::Kernel> MakeViewKernel(const Dims& out_dims, DataType dtype, const std::string& name);

// Out = In with dims permuted (Out dim i is In dim perm[i]). Args: In -> Out.
// A generated kernel (Xbyak, a load and a store per element over strided
// operands) when the permutation keeps the innermost dim and the collapsed
// space has at most 4 dims and the element is 4 bytes; else a kiln strided
// copy (OpenMP over the outer dim).
// `op_type` names the op it computes in dumps. Resize serves other dims
// with the same perm and the same loops (the generated code shared): it
// fails where a dim that was 1 (no loop) is not 1 any more, or Out is not
// In permuted.
std::shared_ptr<const runtime::Kernel> MakeTransposeKernel(const Dims& in_dims, const std::vector<int64_t>& perm,
                                                           DataType dtype, Isa isa, const std::string& name,
                                                           const std::string& op_type);

}  // namespace kiln::jit
