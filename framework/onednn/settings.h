// How oneDNN kernels run: a value owned by whoever runs a program, never a
// process-wide switch. The tools and the Python package fill it from flags at
// their edge (OneDnnSettingsFromFlags, framework/flags.h); it reaches the
// framework's kernels through ExecutorOptions::onednn and their ExecContext,
// and the JIT's kernels through the CompileOptions they were compiled with
// (CompileOptions::OneDnnSettings()). A test builds the one it needs.
#pragma once

#include <vector>

#include "framework/data_type.h"
#include "framework/onednn/reorder_note.h"

namespace kiln::onednn {

struct Settings {
  // oneDNN sometimes has only a generic implementation for a case ("ref:any"
  // for a softmax over a non-innermost axis or an unusual broadcast,
  // "simple_nchw" pooling for few channels); measured here those run 5-200x
  // slower than kiln's reference kernels, so by default a handler refuses
  // them (Acquire*Primitive returns false and the kernel falls back). Tests
  // turn them on to check descriptor set-up on every case.
  bool allow_slow_impls = false;
  // --deterministic: oneDNN picks blockings and splits reductions by the
  // number of OpenMP threads a primitive is created for, so its results
  // differ in the last bits between thread counts. When set, every primitive
  // is created for one thread and runs on one (the calling thread's OpenMP
  // thread count is set to 1 around creation and execution); cache keys
  // record it (PrimitiveKey::threads), so primitives of the two modes never
  // mix.
  bool deterministic = false;
  // --amp: what the framework's matmul and conv2d kernels (forward and
  // gradients) multiply in. Their tensors stay f32.
  ComputeType amp_compute = ComputeType::kF32;
  // A dry run (runtime::Kernel::Reorders of a framework op a cluster runs):
  // when set, a handler acquires its primitives as always but executes
  // nothing; each Execute appends the reorders its entry would run to this
  // list. The kernel's own code still runs, on the buffers it was given.
  // Not compared by ==: it changes whether primitives run, never which.
  std::vector<ReorderNote>* dry_run = nullptr;

  bool operator==(const Settings& o) const {
    return allow_slow_impls == o.allow_slow_impls && deterministic == o.deterministic && amp_compute == o.amp_compute;
  }
  bool operator!=(const Settings& o) const { return !(*this == o); }
};

}  // namespace kiln::onednn
