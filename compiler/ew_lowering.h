// Partition of a cluster's ops into execution units: maximal groups of
// elementwise ops become one generated kernel each; every other op is a unit
// of its own that runs its framework kernel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"
#include "runtime/program.h"

namespace kiln::jit {

struct LoweredUnit {
  // A generated kernel and its argument vars (inputs first), or
  // kernel == nullptr and op_index: run block.ops(op_index) as a framework op.
  std::shared_ptr<const runtime::Kernel> kernel;
  std::vector<std::string> arg_names;
  int num_inputs = 0;
  int op_index = -1;
  // With op_index: run this variant of the op instead (a gradient output the
  // lowering computes elsewhere is @EMPTY@ here).
  std::shared_ptr<const proto::OpDesc> op_override;
  std::vector<int> fused_ops;  // op indices a generated kernel covers
  // Temps the lowering introduces (not in the block): declared before use.
  std::vector<proto::VarDesc> new_vars;
};

// `block` has concrete shapes (InferConcreteShapes). Units come in an order
// that respects every dependency of the ops.
std::vector<LoweredUnit> PartitionElementwise(const proto::BlockDesc& block, const JitSubgraph& subgraph,
                                              const CompileOptions& options, const OpRegistry& registry);

}  // namespace kiln::jit
