// Lowering of one cluster for one shape signature: shape inference with the
// concrete input shapes, partition of the ops into kernels (generated
// elementwise kernels, framework/oneDNN kernels for anchors), buffer
// assignment and the arena plan.
#pragma once

#include <memory>

#include "compiler/compiled_object.h"
#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"

namespace kiln::jit {

// Throws kiln::Error naming the cluster and the reason when the cluster
// cannot be compiled for these shapes (the caller then runs the framework ops).
std::unique_ptr<CompiledObject> Lower(const std::string& key, const JitSubgraph& subgraph,
                                      const ShapeSignature& signature, const CompileOptions& options,
                                      const OpRegistry& registry = OpRegistry::Global());

// The subgraph's block with every var's dims made concrete for `signature`.
proto::BlockDesc InferConcreteShapes(const JitSubgraph& subgraph, const ShapeSignature& signature,
                                     const OpRegistry& registry = OpRegistry::Global());

}  // namespace kiln::jit
