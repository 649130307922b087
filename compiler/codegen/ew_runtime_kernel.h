// A generated elementwise kernel (compiler/codegen/ew_codegen.h) as a runtime kernel:
// arguments are the kernel's inputs, then its outputs.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "runtime/program.h"

namespace kiln::jit {

// The most inputs, and the most outputs, one generated kernel takes (the
// runtime passes their pointers in fixed arrays). elementwise_groups keeps
// every group within it.
constexpr size_t kMaxEwOperands = 64;

// The kernel's layout when its args (inputs, then outputs, as the
// instruction binds them) have `arg_dims`: dims and strides (element types
// are the kernel's own), or nullopt with the reason in `why`.
using EwLayoutOf = std::function<std::optional<EwLayout>(const std::vector<Dims>& arg_dims, std::string* why)>;

// `describe` is the line listings and dumps show. The kernel must be created.
// Resize(dims) serves other sizes with the same generated code: the layout
// `layout_of` gives for them, when the code can compute it
// (FusedElementwiseKernel::Resized); without `layout_of`, the kernel is
// made for fixed sizes (Resize gives nullptr).
std::shared_ptr<const runtime::Kernel> MakeEwRuntimeKernel(std::shared_ptr<jit::FusedElementwiseKernel> kernel,
                                                           std::string describe, EwLayoutOf layout_of = nullptr);

// The layout_of of a kernel over one contiguous range of n elements, rank
// 1 at every size: input k is one element read everywhere where
// scalar_inputs[k] (stride 0), else every arg (the other inputs, then the
// outputs) holds n elements (stride 1).
EwLayoutOf FlatLayoutOf(std::vector<bool> scalar_inputs);

}  // namespace kiln::jit
