// decomposition_fusion_pass's attention part (the pass's contract is in
// passes/decomposition_fusion_pass.h): puts an exported masked-softmax
// attention into the form attention_fusion_pass fuses. Internal to the pass.
#pragma once

#include <string>
#include <vector>

#include "framework/ir/graph.h"
#include "framework/op_registry.h"
#include "passes/decomposition_fusion_pass.h"

namespace kiln::decomposition_fusion {

// Rewrites every attention it matches; returns their probabilities' names
// ("<P> (causal)" for the causal ones) in the order rewritten.
std::vector<std::string> CanonicalizeAttention(ir::Graph& graph, const DecompositionFusionPassOptions& options,
                                               const OpRegistry& registry);

}  // namespace kiln::decomposition_fusion
