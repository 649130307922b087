// The jit_launch op: runs one cluster through its compiled object.
//
// The kernel gathers its inputs from the scope, builds the shape signature,
// gets the CompiledObject from JitCompiler::Instance() (compiling on a miss)
// and binds the scope tensors' data pointers straight into the program's
// argument slots: inputs are read in place, outputs are allocated in the
// scope's tensors and written there (no copy in, no copy out). An output
// naming the same var as an input (an optimizer update) is computed in place
// when that buffer is donatable (no other tensor shares it); otherwise the
// var gets a fresh copy first (copy-protection) and the sharer keeps the old
// values. Two launch modes: kRuntime runs the instruction list through
// runtime::Runner; kExecutor turns it into a program of jit_kernel ops and
// runs that through the framework Executor. A cluster the compiler gives up
// on runs its subgraph's framework ops.
//
// Shadow checks (JitCompilerOptions::shadow, --jit_shadow_every): a checked
// launch copies its inputs first, runs compiled, then runs the subgraph's
// framework ops on the copies and compares (launch_op/shadow_check.h). A
// mismatch denies the cluster (reported once) and the launch's outputs become
// the framework's, so training goes on on framework kernels.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/jit_compiler.h"

namespace kiln {
class OpRegistry;
}

namespace kiln::jit {

enum class LaunchMode { kRuntime, kExecutor };
// "runtime" | "executor"; throws InvalidArgument otherwise.
LaunchMode ParseLaunchMode(const std::string& name);

// Process-wide launch settings, set once at the tool edge.
void SetLaunchMode(LaunchMode mode);
LaunchMode GetLaunchMode();

// Executor-mode programs alive (each belongs to a compiled object: bounded
// by the compiler's cache and the objects launches still hold).
int64_t ExecutorModeProgramsAlive();

// The launch counters of JitCompiler::Instance() (its stats().launch), which
// the jit_launch op counts into.
LaunchStats GetLaunchStats();
void ResetLaunchStats();

// Registers jit_launch and jit_kernel. Call once at start-up.
void RegisterJitOps(OpRegistry& registry);

}  // namespace kiln::jit
