// The jit_launch op: runs one cluster through its compiled object.
//
// The kernel gathers its inputs from the scope, builds the shape signature,
// gets the CompiledObject from the JitRuntime the op was registered with
// (compiling on a miss) and binds the scope tensors' data pointers straight
// into the program's argument slots: inputs are read in place, outputs are
// allocated in the scope's tensors and written there (no copy in, no copy
// out). An output naming the same var as an input (an optimizer update) is
// computed in place when that buffer is donatable (no other tensor shares
// it); otherwise the var gets a fresh copy first (copy-protection) and the
// sharer keeps the old values. Two launch modes (JitOptions::launch_mode):
// kRuntime runs the instruction list through runtime::Runner; kExecutor turns
// it into a program of jit_kernel ops and runs that through the framework
// Executor. A cluster the runtime gives up on runs its subgraph's framework
// ops.
//
// Shadow checks (JitOptions::shadow, --jit_shadow_every): a checked launch
// copies its inputs first, runs compiled, then runs the subgraph's framework
// ops on the copies and compares (launch_op/shadow_check.h). A mismatch
// denies the cluster (reported once) and the launch's outputs become the
// framework's, so training goes on on framework kernels.
#pragma once

#include "launch_op/jit_runtime.h"

namespace kiln {
class OpRegistry;
}

namespace kiln::jit {

// Registers jit_launch and jit_kernel in `registry`, launching through
// `runtime`; both must outlive every program run with the registry. A
// registry holds the ops of one runtime: registering again is a no-op.
void RegisterJitOps(OpRegistry& registry, JitRuntime& runtime);

}  // namespace kiln::jit
