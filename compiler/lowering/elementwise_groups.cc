#include "compiler/lowering/elementwise_groups.h"

#include <algorithm>
#include <unordered_map>

#include "compiler/lowering/units/ew_group.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kElementwiseGroupsStep;

// Builds the new unit list in order, knowing for each var the last position
// that reads and writes it, so that a fragment's move up to a group is
// checked without scanning the units after it.
class Grouper {
 public:

  void Append(std::unique_ptr<Unit> unit) {
    const int pos = static_cast<int>(out_.size());
    for (const auto& r : unit->reads()) last_reader_[r] = pos;
    for (const auto& w : unit->writes()) last_writer_[w] = pos;
    out_.push_back(std::move(unit));
  }

  // Puts a fragment into the first group it can join, else a new group.
  // Groups before EarliestPlace(f) cannot take it: the search starts there.
  void Place(int op, const EwFragment& f) {
    for (auto it = std::lower_bound(groups_.begin(), groups_.end(), EarliestPlace(f)); it != groups_.end(); ++it) {
      const int gi = *it;
      if (!CanJoin(f, gi)) continue;
      static_cast<EwGroupUnit*>(out_[gi].get())->Add(op, f);
      for (const EwAccess& r : f.reads) Raise(&last_reader_, r.var, gi);
      for (const EwAccess& w : f.writes) Raise(&last_writer_, w.var, gi);
      return;
    }
    auto g = std::make_unique<EwGroupUnit>(kStep, f.iter);
    g->Add(op, f);
    groups_.push_back(static_cast<int>(out_.size()));
    Append(std::move(g));
  }

  Units Take() { return std::move(out_); }
  const std::vector<int>& groups() const { return groups_; }
  const Units& units() const { return out_; }

 private:
  static void Raise(std::unordered_map<std::string, int>* m, const std::string& var, int pos) {
    auto [it, inserted] = m->emplace(var, pos);
    if (!inserted) it->second = std::max(it->second, pos);
  }
  int Last(const std::unordered_map<std::string, int>& m, const std::string& var) const {
    auto it = m.find(var);
    return it == m.end() ? -1 : it->second;
  }

  // The first position CanJoin's ordering checks allow for `f`: no unit
  // after it writes what f reads, nor reads or writes what f writes.
  int EarliestPlace(const EwFragment& f) const {
    int at = 0;
    for (const EwAccess& r : f.reads) at = std::max(at, Last(last_writer_, r.var));
    for (const EwAccess& w : f.writes) at = std::max({at, Last(last_reader_, w.var), Last(last_writer_, w.var)});
    return at;
  }

  // Can `f` run at group `gi`'s place? Its inputs must hold the values it
  // reads there, and nothing after that place may touch what it writes.
  bool CanJoin(const EwFragment& f, int gi) const {
    const auto& g = static_cast<const EwGroupUnit&>(*out_[gi]);
    if (g.iter() != f.iter || !g.Fits(f)) return false;
    for (const EwAccess& r : f.reads) {
      // A later unit writes the value f must read (an in-place update).
      if (Last(last_writer_, r.var) > gi) return false;
      if (g.HoldsFull(r.var) && r.dims == f.iter) continue;  // in a register
      if (g.writes().count(r.var)) return false;  // written here, but needed from memory
    }
    for (const EwAccess& w : f.writes) {
      if (Last(last_reader_, w.var) > gi || Last(last_writer_, w.var) > gi) return false;
    }
    return true;
  }

  Units out_;
  std::vector<int> groups_;  // positions of the groups in out_
  std::unordered_map<std::string, int> last_reader_, last_writer_;
};

// A fragment that updates state in place which no later op reads or writes,
// and whose inputs no later op writes, may run at the end of the cluster;
// not one that reads a value the cluster makes (a parameter update reading
// its gradient), which would then stay live to the end: early_updates put
// that update where the value is ready.
bool Deferrable(const Cluster& c, int i, const EwFragment& f) {
  for (const EwAccess& r : f.reads) {
    if (c.Producer(i, r.var) >= 0) return false;
  }
  for (const EwAccess& w : f.writes) {
    bool in_place = false;
    for (const EwAccess& r : f.reads) in_place = in_place || r.var == w.var;
    if (!in_place || !c.IsLastWrite(i, w.var) || !c.Consumers(i, w.var).empty()) return false;
  }
  for (const EwAccess& r : f.reads) {
    if (c.WrittenLaterByOthers(i, r.var)) return false;
  }
  return true;
}

}  // namespace

Units GroupElementwise(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().fuse_elementwise) return units;
  Grouper grouper;
  std::vector<std::pair<size_t, std::pair<int, const EwFragment*>>> deferred;  // (position in its op, fragment)
  for (auto& unit : units) {
    const int i = PendingOpOf(*unit);
    if (i < 0 || c.fragments(i).empty() || c.Excluded(kStep, i)) {
      grouper.Append(std::move(unit));
      continue;
    }
    const std::vector<EwFragment>& frags = c.fragments(i);
    // An op with a fragment too wide for one kernel (a sum of more than
    // kMaxEwOperands vars) stays whole for the steps after this one.
    const bool fits = std::all_of(frags.begin(), frags.end(),
                                  [](const EwFragment& f) { return EwGroupUnit(kStep, f.iter).Fits(f); });
    if (!fits) {
      grouper.Append(std::move(unit));
      continue;
    }
    for (size_t k = 0; k < frags.size(); ++k) {
      if (Deferrable(c, i, frags[k])) {
        deferred.push_back({k, {i, &frags[k]}});
      } else {
        grouper.Place(i, frags[k]);
      }
    }
  }
  // State updates nothing later in the cluster reads (adam's beta powers) run
  // last, so those of every parameter share one kernel. Deferred fragments
  // of different ops touch disjoint vars (Deferrable), so only their order
  // within an op matters: every op's first fragment, then every second one.
  std::stable_sort(deferred.begin(), deferred.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [k, piece] : deferred) grouper.Place(piece.first, *piece.second);
  for (int gi : grouper.groups()) {
    const Unit& g = *grouper.units()[gi];
    trace.Match(OpList(c, g.ops()) + " -> " + g.Describe(c));
  }
  return grouper.Take();
}

}  // namespace kiln::jit
