// An object compiled for every value of some input dims (LowerDynamic), made
// ready for one concrete shape: no lowering, no code generation.
//
// The instance evaluates the buffer and output dims at the symbols' values,
// checks the cluster's vars against shape inference at the concrete shapes
// (`block`, from InferConcreteShapes: a var whose dims disagree with its
// polynomial is a failed guard), takes each kernel as it is where its
// arguments keep their dims or it reads dims at run time, else the kernel's
// Resize (which checks the kernel's own assumptions), and plans the arena
// again for the new sizes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "framework/proto/framework.pb.h"

namespace kiln::jit {

// The kernel of `ins` for buffers of `dims` (by buffer id) in a program
// made for `made_for`'s dims: the same kernel where its arguments keep their
// dims or it reads dims at run time, else its Resize (nullptr with the
// reason in `why` when it cannot take them).
std::shared_ptr<const runtime::Kernel> KernelForDims(const runtime::Instruction& ins,
                                                     const runtime::BufferPlan& made_for,
                                                     const std::vector<Dims>& dims, std::string* why);

// Throws kiln::Error (Unimplemented) naming the failed guard; the caller
// then compiles the shape specialised.
std::unique_ptr<CompiledObject> Instantiate(const CompiledObject& dynamic, const ShapeSignature& signature,
                                            const proto::BlockDesc& block);

}  // namespace kiln::jit
