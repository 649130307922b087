// A generated elementwise kernel (compiler/codegen/ew_codegen.h) as a runtime kernel:
// arguments are the kernel's inputs, then its outputs.
#pragma once

#include <memory>
#include <string>

#include "compiler/codegen/ew_codegen.h"
#include "runtime/program.h"

namespace kiln::jit {

// The most inputs, and the most outputs, one generated kernel takes (the
// runtime passes their pointers in fixed arrays). elementwise_groups keeps
// every group within it.
constexpr size_t kMaxEwOperands = 64;

// `describe` is the line listings and dumps show. The kernel must be created.
std::shared_ptr<const runtime::Kernel> MakeEwRuntimeKernel(std::shared_ptr<jit::FusedElementwiseKernel> kernel,
                                                           std::string describe);

}  // namespace kiln::jit
