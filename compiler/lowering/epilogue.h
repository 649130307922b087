// What the matmul and conv epilogue steps share: finding, after an op's
// output, a bias add and an activation that read it alone, so that the three
// may run as one oneDNN primitive with post-ops.
#pragma once

#include <string>
#include <vector>

#include "compiler/kernels/onednn/onednn_kernels.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

struct Epilogue {
  std::vector<int> ops;  // the bias add and/or the activation, in order
  std::string bias;      // the bias var, or ""
  MatmulActivation activation = MatmulActivation::kNone;
  std::string result;    // the last value the fused primitive writes
};

struct EpilogueRule {
  Dims bias_dims;                    // the bias must have these dims
  std::vector<int64_t> bias_axes;    // and be added at one of these axes
  bool activation_needs_bias = false;  // an activation is fused only after a bias
};

// The epilogue of the value op `i` writes into `out`, among pending units,
// for step `step`. Every op it takes reads the value before it alone (no
// other reader, not a cluster output); the bias comes from outside the
// cluster; the activation is a relu or gelu of the sum. Checks too that no
// unit between op `i` and the last op taken touches what the fusion moves.
Epilogue MatchEpilogue(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i,
                       const std::string& out, std::string_view step, const EpilogueRule& rule,
                       const std::set<std::string>& operands);

}  // namespace kiln::jit
