// oneDNN kernels for the ops of framework/ops, attached to registry entries
// that the reference registration created.
#pragma once

namespace kiln {

class OpRegistry;

void AttachOneDnnKernels(OpRegistry& r);

}  // namespace kiln
