// IN PROGRESS
#include "framework/onednn/onednn_kernels.h"
#include "framework/op_registry.h"

namespace kiln {

void AttachOneDnnKernels(OpRegistry& r) { (void)r; }

}  // namespace kiln
