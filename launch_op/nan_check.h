// --check_nan_inf inside a compiled cluster. The executor checks what each op
// wrote; a jit_launch writes a whole cluster at once, so with the flag on the
// launch checks after every instruction and names the cluster's own op and
// var that first hold a NaN or Inf, not just the cluster.
#pragma once

#include "compiler/compiled_object.h"
#include "framework/jit_subgraph.h"
#include "runtime/runner.h"

namespace kiln::jit {

// A hook for runtime::Runner that throws InvalidArgument at the first NaN/Inf
// an instruction of `obj` wrote: the cluster key, the op of `sg` that writes
// that var, the var, the element, and the kernel that computed it.
runtime::InstructionHook NanInfCheck(const CompiledObject& obj, const JitSubgraph& sg);

}  // namespace kiln::jit
