// Build-time checks of a program: every op is registered, its slots and
// attributes match its entry, every argument is a declared var, and shape
// inference agrees with the declared dims (-1 matches anything).
#pragma once

#include "framework/op_registry.h"
#include "framework/proto/framework.pb.h"

namespace kiln {

// Throws InvalidArgument / NotFound naming the op (index and type), the slot
// or var, and what was expected. A var's dims must be positive or -1, with
// at most 2^60 elements.
void ValidateProgram(const proto::ProgramDesc& program, const OpRegistry& registry = OpRegistry::Global());

// Runs compile-time InferShape of op `op_index` in `block`. Outputs that are
// not declared yet are declared with the inferred dims/dtype when
// `declare_outputs`; declared ones must be compatible. Used by builders.
void InferShapeAtBuild(proto::BlockDesc* block, int op_index, bool declare_outputs,
                       const OpRegistry& registry = OpRegistry::Global());

}  // namespace kiln
