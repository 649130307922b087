// Turning a program into its JIT form: build_jit_pass over block 0 with the
// subgraphs stored in JitCompiler::Instance().
#pragma once

#include "framework/proto/framework.pb.h"
#include "passes/build_jit_pass.h"

namespace kiln::jit {

// Returns `program` with its clusters replaced by jit_launch ops. `report`
// (optional) receives what was clustered and why the rest was not.
proto::ProgramDesc ApplyBuildJitPass(const proto::ProgramDesc& program, const BuildJitPassOptions& options,
                                     BuildJitReport* report = nullptr);

}  // namespace kiln::jit
