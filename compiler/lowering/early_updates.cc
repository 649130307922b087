#include "compiler/lowering/early_updates.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kiln::jit {
namespace {

// The vars a unit with a layout op reads: a parameter among them may be
// read under another name, through a view.
std::set<std::string> ReadByLayoutOps(const Cluster& c, const Units& units) {
  std::set<std::string> vars;
  for (const auto& unit : units) {
    for (int o : unit->ops()) {
      if (c.info(o).jit == JitLowering::kLayout) vars.insert(unit->reads().begin(), unit->reads().end());
    }
  }
  return vars;
}

// The op of a pending parameter update that may move, or -1.
int MovableUpdate(const Cluster& c, const Unit& unit, const std::set<std::string>& read_by_layout) {
  const int op = PendingOpOf(unit);
  if (op < 0 || !IsParameterUpdate(c.op(op), c.registry())) return -1;
  const std::string param = c.In(op, "Param");
  return param.empty() || read_by_layout.count(param) ? -1 : op;
}

}  // namespace

Units RunUpdatesEarly(const Cluster& c, Units units, StepTrace& trace) {
  // Where each unit goes, in the order of the units (the index of the unit
  // it runs before, times two, minus one for a moved update): a stable sort
  // on it keeps every other unit's order and the moved updates' own.
  std::vector<std::pair<int64_t, size_t>> key;
  std::map<std::string, int64_t> last_write, last_read;  // var -> unit index
  std::vector<int> moved;
  const std::set<std::string> read_by_layout = ReadByLayoutOps(c, units);
  // others[k]: how many of the first k units are not movable updates; an
  // update moves only past some of them (not just past other updates).
  std::vector<int64_t> others = {0};
  for (size_t u = 0; u < units.size(); ++u) {
    const Unit& unit = *units[u];
    int64_t pos = 2 * static_cast<int64_t>(u);
    const int op = MovableUpdate(c, unit, read_by_layout);
    if (op >= 0) {
      int64_t after = -1;
      for (const std::string& v : unit.reads()) {
        if (last_write.count(v)) after = std::max(after, last_write[v]);
      }
      for (const std::string& v : unit.writes()) {
        if (last_write.count(v)) after = std::max(after, last_write[v]);
        if (last_read.count(v)) after = std::max(after, last_read[v]);
      }
      if (others[u] > others[after + 1]) {
        pos = 2 * (after + 1) - 1;
        moved.push_back(op);
      }
    }
    key.emplace_back(pos, u);
    others.push_back(others.back() + (op >= 0 ? 0 : 1));
    for (const std::string& v : unit.reads()) last_read[v] = static_cast<int64_t>(u);
    for (const std::string& v : unit.writes()) last_write[v] = static_cast<int64_t>(u);
  }
  if (moved.empty()) return units;
  std::stable_sort(key.begin(), key.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Units out;
  for (const auto& [pos, u] : key) out.push_back(std::move(units[u]));
  trace.Match(OpList(c, moved) + " -> each right after the last unit that touches what it reads or writes");
  return out;
}

}  // namespace kiln::jit
