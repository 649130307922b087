// A generated elementwise kernel (compiler/ew_codegen.h) as a runtime kernel:
// arguments are the kernel's inputs, then its outputs.
#pragma once

#include <memory>
#include <string>

#include "compiler/ew_codegen.h"
#include "runtime/program.h"

namespace kiln::jit {

// `describe` is the line listings and dumps show. The kernel must be created.
std::shared_ptr<const runtime::Kernel> MakeEwRuntimeKernel(std::shared_ptr<compiler::FusedElementwiseKernel> kernel,
                                                           std::string describe);

}  // namespace kiln::jit
