// Lowering step: ops whose results nothing uses are dropped before any other
// step sees them. build_jit_pass makes a cluster's outputs only of the vars
// the rest of the program (or the caller) needs, so a cluster can hold ops
// that compute for nobody: the input gradient of an input that is not
// fetched, a loss the evaluation program computes and never reads. Run, they
// cost time and arena memory, and a value they read for its dims alone
// would have to be kept although no kernel stores it. Which ops are dead is
// the cluster's to say (Cluster::dead); its edge queries already leave them
// out, so no pattern is refused for a dead reader.
//
// Every clustered op is a function of its inputs (random ops carry their
// state in vars), so leaving one out changes no value a reader sees. What
// goes with it is the op's own checks: a dropped lookup_table_grad no longer
// rejects an out-of-range id, and --check_nan_inf sees nothing of it.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

// An op the step dropped: it emits no kernel and reads and writes nothing.
class DroppedOp final : public Unit {
 public:
  DroppedOp(const std::string& step, int op) : Unit(step, {op}, {}, {}) {}
  const char* kind() const override { return "dropped"; }
  std::string Describe(const Cluster&) const override { return "nothing the cluster uses reads what it writes"; }
  std::vector<EmittedKernel> Emit(EmitContext&) const override { return {}; }
};

Units DropDeadOps(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kDeadOpsStep[] = "dead_ops";

}  // namespace kiln::jit
