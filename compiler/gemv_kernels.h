// The batch-1 matmul kernels of the JIT as runtime kernels (the math is in
// compiler/gemv.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/program.h"

namespace kiln::jit {

// X [1,K], W [K,N][, bias [N]] -> Out [1,N], relu when `relu`.
std::shared_ptr<const runtime::Kernel> MakeGemvMatmulKernel(int64_t k, int64_t n, bool bias, bool relu,
                                                            const std::string& name);

}  // namespace kiln::jit
