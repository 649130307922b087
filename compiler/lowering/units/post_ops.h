// The post-ops of a fused oneDNN primitive (a bias add, an activation) as
// the units that run one print them in lowering.txt.
#pragma once

#include <string>

#include "compiler/kernels/onednn/onednn_kernels.h"

namespace kiln::jit {

// "+ bias + relu": the epilogue in lowering.txt.
std::string EpilogueText(bool bias, MatmulActivation activation);

}  // namespace kiln::jit
