// Lowering of one cluster for one shape signature, in the shape of Halide's
// Lower(): the cluster's ops with concrete shapes (lowering/cluster.h) go
// through a flat, ordered list of steps (lowering/*.h, listed in lower.cc),
// each turning ops into typed units (lowering/units/unit.h); the units become
// kernels, a unit that cannot be compiled falls back alone to framework
// kernels, and the kernels become a program with an arena plan
// (lowering/buffers.h). What each step matched is kept as the compiled
// object's lowering trace (kiln dump's lowering.txt).
#pragma once

#include <memory>
#include <string>

#include "compiler/compiled_object.h"
#include "compiler/lowering/cluster.h"
#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"

namespace kiln::jit {

// Throws kiln::Error naming the cluster and the reason when the cluster
// cannot be compiled for these shapes (the caller then runs the framework ops).
std::unique_ptr<CompiledObject> Lower(const std::string& key, const JitSubgraph& subgraph,
                                      const ShapeSignature& signature, const CompileOptions& options,
                                      const OpRegistry& registry = OpRegistry::Global());

}  // namespace kiln::jit
