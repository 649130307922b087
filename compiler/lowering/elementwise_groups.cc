#include "compiler/lowering/elementwise_groups.h"

#include <algorithm>
#include <unordered_map>

#include "compiler/codegen/ew_runtime_kernel.h"

namespace kiln::jit {
namespace {

// A bool var is bytes in memory and 0.0/1.0 in the program.
EwElem ElemOf(const Cluster& c, const std::string& var) {
  const proto::DataType d = c.var(var).dtype();
  KILN_CHECK(d == proto::FP32 || d == proto::BOOL, "elementwise group: var '", var, "' has dtype ",
             DataTypeName(FromProto(d)), "; Cluster asks for fragments only when every arg is f32 or bool");
  return d == proto::BOOL ? EwElem::kBool : EwElem::kF32;
}

}  // namespace

EwGroupUnit::EwGroupUnit(const std::string& step, Dims iter) : Unit(step, {}, {}, {}), iter_(std::move(iter)) {}

void EwGroupUnit::Add(int op, const EwFragment& f) {
  for (const EwAccess& r : f.reads) {
    reads_.insert(r.var);
    loads_.insert({r.var, r.dims});
  }
  for (const EwAccess& w : f.writes) {
    writes_.insert(w.var);
    if (w.dims == iter_) {
      full_defined_[w.var] = w.dims;
    } else {
      full_defined_.erase(w.var);
    }
  }
  AddOps({op});
  pieces_.push_back({op, f});
}

void EwGroupUnit::StoreAsBf16(const std::string& var) {
  KILN_CHECK(HoldsFull(var), "StoreAsBf16: the group does not hold all of ", var);
  bf16_.insert(var);
  writes_.insert(var + "@BF16");
}

bool EwGroupUnit::Fits(const EwFragment& f) const {
  size_t loads = loads_.size(), writes = writes_.size();
  for (const EwAccess& r : f.reads) loads += loads_.count({r.var, r.dims}) ? 0 : 1;
  for (const EwAccess& w : f.writes) writes += writes_.count(w.var) ? 0 : 1;
  return loads <= kMaxEwOperands && writes <= kMaxEwOperands;
}

std::string EwGroupUnit::Describe(const Cluster&) const {
  return "generated elementwise kernel over " + DimsToString(iter_);
}

std::vector<EmittedKernel> EwGroupUnit::Emit(EmitContext& ctx) const {
  const Cluster& c = ctx.cluster();
  EwProgram program;
  std::vector<EwAccess> inputs;
  std::map<std::pair<std::string, Dims>, EwValue> loaded;
  std::map<std::string, std::pair<EwValue, Dims>> current;  // latest value of a var in this group
  std::vector<int> ops;
  for (const Piece& piece : pieces_) {
    std::vector<EwValue> in;
    for (const EwAccess& r : piece.fragment.reads) {
      auto cur = current.find(r.var);
      if (cur != current.end() && cur->second.second == r.dims && r.dims == iter_) {
        in.push_back(cur->second.first);
        continue;
      }
      auto it = loaded.find({r.var, r.dims});
      if (it == loaded.end()) {
        it = loaded.emplace(std::make_pair(r.var, r.dims), program.Load(static_cast<int>(inputs.size()))).first;
        inputs.push_back(r);
      }
      in.push_back(it->second);
    }
    const std::vector<EwValue> out = piece.fragment.emit(program, in);
    // An Error, not a KILN_CHECK: the group's ops then lower without it.
    if (out.size() != piece.fragment.writes.size()) {
      ThrowInternal("op #", piece.op, " ", c.type(piece.op), ": its elementwise fragment computes ", out.size(),
                    " values for ", piece.fragment.writes.size(), " writes");
    }
    for (size_t k = 0; k < out.size(); ++k) current[piece.fragment.writes[k].var] = {out[k], piece.fragment.writes[k].dims};
    if (std::find(ops.begin(), ops.end(), piece.op) == ops.end()) ops.push_back(piece.op);
  }
  std::vector<EwAccess> outputs;
  std::vector<bool> out_bf16;
  std::vector<proto::VarDesc> bf16_vars;
  for (const auto& [var, value] : current) {
    if (bf16_.count(var) > 0 && ctx.Stored(var + "@BF16")) {
      program.Store(static_cast<int>(outputs.size()), value.first);
      outputs.push_back({var + "@BF16", value.second});
      out_bf16.push_back(true);
      bf16_vars.push_back(c.var(var));
      bf16_vars.back().set_name(var + "@BF16");
      bf16_vars.back().set_persistable(false);
      bf16_vars.back().set_dtype(proto::BF16);
    }
    if (!ctx.Stored(var)) continue;
    program.Store(static_cast<int>(outputs.size()), value.first);
    outputs.push_back({var, value.second});
    out_bf16.push_back(false);
  }
  if (outputs.empty()) ThrowInvalidArgument("elementwise group computes nothing that is used");
  std::vector<Dims> in_dims, out_dims;
  for (const auto& i : inputs) in_dims.push_back(i.dims);
  for (const auto& o : outputs) out_dims.push_back(o.dims);
  EwLayout layout = CollapseLayout(iter_, in_dims, out_dims);
  for (size_t k = 0; k < inputs.size(); ++k) layout.inputs[k].elem = ElemOf(c, inputs[k].var);
  for (size_t o = 0; o < outputs.size(); ++o) {
    layout.outputs[o].elem = out_bf16[o] ? EwElem::kBF16 : ElemOf(c, outputs[o].var);
  }
  const Isa isa = c.options().isa;
  auto kernel = std::make_shared<jit::FusedElementwiseKernel>(ctx.KernelName("ew"), program, layout, isa);
  std::vector<std::string> types;
  for (int op : ops) types.push_back(c.type(op));
  kernel->set_fused_ops(types);
  kernel->set_deterministic(c.options().deterministic);
  kernel->Create();
  std::string describe = std::string("generated ") + IsaName(isa) + " kernel, " + std::to_string(program.size()) +
                         " instrs over " + layout.ToString() + " fusing";
  for (const auto& t : types) describe += " " + t;
  EmittedKernel k;
  k.kernel = MakeEwRuntimeKernel(kernel, describe);
  for (const auto& i : inputs) k.args.push_back(i.var);
  k.num_inputs = static_cast<int>(inputs.size());
  for (const auto& o : outputs) k.args.push_back(o.var);
  k.new_vars = std::move(bf16_vars);
  return {k};
}

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
  void Place(int op, const EwFragment& f) {
    for (int gi : groups_) {
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
// and whose inputs no later op writes, may run at the end of the cluster.
bool Deferrable(const Cluster& c, int i, const EwFragment& f) {
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
