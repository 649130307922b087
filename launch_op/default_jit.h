// The JIT of the command line and the Python package: one JitRuntime for the
// process, configured from flags by tools/jit_setup.cc, whose ops are
// registered in OpRegistry::GlobalForRegistration(). Only the tool edge and
// the bindings reach it; tests and library code take a JitRuntime& instead
// (tools/check_layers.py lets no other file include this header).
#pragma once

#include "launch_op/jit_runtime.h"

namespace kiln::jit {

JitRuntime& DefaultJit();

}  // namespace kiln::jit
