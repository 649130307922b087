#include "launch_op/default_jit.h"

namespace kiln::jit {

JitRuntime& DefaultJit() {
  // Never destroyed: launches on other threads and the at-exit profile
  // report may still use it while statics are torn down.
  static JitRuntime* runtime = new JitRuntime();
  return *runtime;
}

}  // namespace kiln::jit
