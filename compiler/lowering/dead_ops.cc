#include "compiler/lowering/dead_ops.h"

#include <algorithm>
#include <set>

#include "framework/op_desc.h"

namespace kiln::jit {

namespace {
constexpr const char* kStep = "dead_ops";
}  // namespace

std::vector<int> DeadOps(const Cluster& c) {
  // The vars whose current value (at the op being looked at) someone needs.
  std::set<std::string> needed(c.subgraph().outputs.begin(), c.subgraph().outputs.end());
  std::vector<int> dead;
  for (int i = c.num_ops() - 1; i >= 0; --i) {
    const std::vector<std::string> writes = OutputVars(c.op(i));
    const bool live = writes.empty() || std::any_of(writes.begin(), writes.end(), [&](const std::string& v) {
                        return needed.count(v) > 0;
                      });
    if (!live) {
      dead.push_back(i);
      continue;
    }
    // An op writes the whole of each output: the values before it are needed
    // only by what it reads (an in-place op reads its output var first).
    for (const std::string& v : writes) needed.erase(v);
    for (const std::string& v : InputVars(c.op(i))) needed.insert(v);
  }
  std::reverse(dead.begin(), dead.end());
  return dead;
}

Units DropDeadOps(const Cluster& c, Units units, StepTrace& trace) {
  const std::vector<int> dead = DeadOps(c);
  if (dead.empty()) return units;
  trace.Match(OpList(c, dead) + " -> dropped: nothing the cluster uses reads what they write");
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i >= 0 && std::binary_search(dead.begin(), dead.end(), i)) unit = std::make_unique<DroppedOp>(kStep, i);
  }
  return units;
}

}  // namespace kiln::jit
