#include "compiler/ew_lowering.h"

namespace kiln::jit {

std::vector<LoweredUnit> PartitionElementwise(const proto::BlockDesc& block, const JitSubgraph& /*subgraph*/,
                                              const CompileOptions& /*options*/, const OpRegistry& /*registry*/) {
  std::vector<LoweredUnit> units;
  for (int i = 0; i < block.ops_size(); ++i) {
    LoweredUnit u;
    u.op_index = i;
    units.push_back(std::move(u));
  }
  return units;
}

}  // namespace kiln::jit
