// IN PROGRESS: registration is being written.
#include "framework/op_registry.h"
#include "framework/ops/ops.h"

namespace kiln {

void RegisterActivationOps(OpRegistry& r) { (void)r; }

}  // namespace kiln
