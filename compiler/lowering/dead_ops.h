// Lowering step: ops whose results nothing uses are dropped before any other
// step sees them. build_jit_pass makes a cluster's outputs only of the vars
// the rest of the program (or the caller) needs, so a cluster can hold ops
// that compute for nobody: the input gradient of an input that is not
// fetched, a backward branch whose result is discarded. Run, they cost time
// and arena memory, and a value they read for its shape alone would have to
// be kept although no kernel stores it. Every clustered op is a function of
// its inputs (random ops carry their state in vars), so leaving one out
// changes nothing a reader sees.
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/unit.h"

namespace kiln::jit {

// An op the step dropped: it emits no kernel and reads and writes nothing.
class DroppedOp final : public Unit {
 public:
  DroppedOp(const std::string& step, int op) : Unit(step, {op}, {}, {}) {}
  const char* kind() const override { return "dropped"; }
  std::string Describe(const Cluster&) const override { return "nothing the cluster uses reads what it writes"; }
  std::vector<EmittedKernel> Emit(EmitContext&) const override { return {}; }
};

// The ops no cluster output depends on, ascending: walking back from the last
// op, an op is live when it writes a var a later live op reads (for its data
// or its shape) or that leaves the cluster. An op that writes nothing is kept.
std::vector<int> DeadOps(const Cluster& c);

Units DropDeadOps(const Cluster& c, Units units, StepTrace& trace);

}  // namespace kiln::jit
