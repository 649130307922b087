// The JIT at the tool edge: flags -> compiler options, launch mode, pass options.
#pragma once

#include <set>
#include <string>

#include "framework/proto/framework.pb.h"

namespace kiln::tools {

// Registers jit_launch/jit_kernel and configures JitCompiler::Instance() and
// the launch mode from the --jit_* flags. Call once before running programs.
void ConfigureJitFromFlags();
// With --use_jit: the program with its clusters replaced by jit_launch ops
// (keep: feeds and fetch targets). Without: the program unchanged.
proto::ProgramDesc MaybeApplyJit(const proto::ProgramDesc& program, const std::set<std::string>& keep);

}  // namespace kiln::tools
