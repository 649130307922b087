// After the steps: the emitted kernels become the compiled object's program.
// One buffer per var: the cluster's inputs and outputs are bound by the
// launch, everything else is a temp in the arena plan. A var that is both an
// input and an output (an in-place update) is one output buffer: the launch
// binds the input's memory (donated) or a protected copy of it there. A
// reshape's output is made a view of its input where nothing rewrites
// either (BufferInfo::view_of).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "compiler/lowering/cluster.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// Fills obj->program (instructions and the arena plan) and the output facts
// (output_alias, output_dims, ...). `kernels` in execution order;
// `data_reads`: the vars units read as data from other units (Unit::reads
// without the unit's own writes). A temp that no kernel writes is dims-only
// (BufferInfo::dims_only); one the units read as data is a compiler bug, and
// throws an internal Error naming the var (the cluster then runs its
// framework ops).
void BuildProgram(const Cluster& c, const std::vector<EmittedKernel>& kernels,
                  const std::set<std::string>& data_reads, CompiledObject* obj);

}  // namespace kiln::jit
