// Lowering step: the ops left that have a oneDNN kernel (convolution,
// pooling, softmax, layer_norm, reductions, matmuls no earlier step fused)
// run it through the framework's handlers on views of the bound buffers;
// their primitives come from the framework's primitive cache.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units ClaimOneDnnAnchors(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kOneDnnAnchorsStep[] = "onednn_anchors";

}  // namespace kiln::jit
