#include "compiler/lowering/units/unit.h"

#include <algorithm>

#include "compiler/kernels/onednn/op_kernel.h"
#include "framework/op_desc.h"

namespace kiln::jit {

Unit::Unit(std::string step, std::vector<int> ops, std::set<std::string> reads, std::set<std::string> writes)
    : reads_(std::move(reads)), writes_(std::move(writes)), step_(std::move(step)), ops_(std::move(ops)) {
  std::sort(ops_.begin(), ops_.end());
}

void Unit::AddOps(const std::vector<int>& ops) {
  for (int op : ops) {
    if (std::find(ops_.begin(), ops_.end(), op) == ops_.end()) ops_.push_back(op);
  }
  std::sort(ops_.begin(), ops_.end());
}

PendingOp::PendingOp(const Cluster& c, int op) : Unit("", {op}, c.reads(op), c.writes(op)) {}

std::vector<EmittedKernel> PendingOp::Emit(EmitContext& ctx) const {
  KILN_CHECK(false, "lowering left ", ctx.cluster().OpLabel(op()), " unclaimed");
  return {};
}

int PendingOpOf(const Unit& unit) {
  const auto* p = dynamic_cast<const PendingOp*>(&unit);
  return p == nullptr ? -1 : p->op();
}

bool AnyOpExcluded(const Cluster& c, std::string_view step, const Unit& unit) {
  for (int op : unit.ops()) {
    if (c.Excluded(step, op)) return true;
  }
  return false;
}

std::vector<int> UnitOfOps(const Cluster& c, const Units& units) {
  std::vector<int> out(c.num_ops(), -1);
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u]) continue;
    for (int op : units[u]->ops()) {
      if (out[op] < 0) out[op] = static_cast<int>(u);
    }
  }
  return out;
}

namespace {

std::set<std::string> ArgSet(const std::vector<std::string>& vars) { return {vars.begin(), vars.end()}; }

// "matmul(X: a, Y: b -> Out: c)", @EMPTY@ args left out.
std::string Signature(const proto::OpDesc& desc) {
  std::string s = desc.type() + "(";
  auto slots = [&s](const auto& list, bool first) {
    for (const auto& slot : list) {
      std::string args;
      for (const auto& a : slot.args()) {
        if (a != kEmptyVarName) args += (args.empty() ? "" : ", ") + a;
      }
      if (args.empty()) continue;
      s += (first ? "" : ", ") + slot.name() + ": " + args;
      first = false;
    }
  };
  slots(desc.inputs(), true);
  s += " ->";
  const size_t before = s.size();
  slots(desc.outputs(), true);
  if (s.size() > before) s.insert(before, " ");
  return s + ")";
}

EmittedKernel EmitFrameworkOp(const Cluster& c, const proto::OpDesc& desc, bool use_onednn) {
  EmittedKernel k;
  k.kernel = std::make_shared<FrameworkOpKernel>(desc, c.registry().Get(desc.type()), use_onednn,
                                                 c.options().OneDnnSettings(), &k.args, &k.num_inputs);
  return k;
}

}  // namespace

OneDnnOpUnit::OneDnnOpUnit(const std::string& step, const Cluster& c, int op, Operands operands)
    : Unit(step, {op}, operands.desc ? ArgSet(InputVars(*operands.desc)) : c.reads(op),
           operands.desc ? ArgSet(OutputVars(*operands.desc)) : c.writes(op)),
      o_(std::move(operands)) {
  for (const DerivedBuffer& d : o_.derived_inputs) {
    KILN_CHECK(d.derived() && reads_.count(d.Name()) > 0, "OneDnnOpUnit: the variant does not read ", d.Name());
  }
}

std::string OneDnnOpUnit::Describe(const Cluster& c) const {
  std::string s = "framework oneDNN kernel " + desc(c).type();
  if (o_.desc) s += " (variant: " + Signature(*o_.desc) + ")";
  return s;
}

std::vector<EmittedKernel> OneDnnOpUnit::Emit(EmitContext& ctx) const {
  return {EmitFrameworkOp(ctx.cluster(), desc(ctx.cluster()), ctx.cluster().options().use_onednn)};
}

FrameworkOpUnit::FrameworkOpUnit(const std::string& step, const Cluster& c, int op)
    : Unit(step, {op}, c.reads(op), c.writes(op)) {}

std::string FrameworkOpUnit::Describe(const Cluster& c) const {
  return "framework reference kernel " + c.type(ops().front());
}

std::vector<EmittedKernel> FrameworkOpUnit::Emit(EmitContext& ctx) const {
  return {EmitFrameworkOp(ctx.cluster(), ctx.cluster().op(ops().front()), /*use_onednn=*/false)};
}

VarUses::VarUses(const Units& units) {
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u]) continue;
    for (const auto& v : units[u]->reads()) readers_[v].push_back(static_cast<int>(u));
    for (const auto& v : units[u]->writes()) writers_[v].push_back(static_cast<int>(u));
  }
}

void VarUses::Remove(int u, const Unit& unit) {
  auto forget = [u](std::map<std::string, std::vector<int>>* m, const std::set<std::string>& vars) {
    for (const auto& v : vars) {
      auto it = m->find(v);
      if (it == m->end()) continue;
      auto& at = it->second;
      at.erase(std::remove(at.begin(), at.end(), u), at.end());
    }
  };
  forget(&readers_, unit.reads());
  forget(&writers_, unit.writes());
}

bool VarUses::NothingBetweenTouches(int from, int to, const std::set<std::string>& reads,
                                    const std::set<std::string>& writes, const std::set<int>& fused) const {
  // A position strictly between from and to that is not the fusion's own.
  auto any_between = [&](const std::vector<int>& at) {
    for (auto it = std::upper_bound(at.begin(), at.end(), from); it != at.end() && *it < to; ++it) {
      if (!fused.count(*it)) return true;
    }
    return false;
  };
  for (const auto* vars : {&reads, &writes}) {
    for (const auto& v : *vars) {
      if (any_between(Writers(v))) return false;
    }
  }
  for (const auto& v : writes) {
    if (any_between(Readers(v))) return false;
  }
  return true;
}

const std::vector<int>& VarUses::Find(const std::map<std::string, std::vector<int>>& m, const std::string& var) {
  static const std::vector<int> kNone;
  auto it = m.find(var);
  return it == m.end() ? kNone : it->second;
}

int OnlyPendingConsumer(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i,
                        const std::string& var, std::string_view step, std::initializer_list<const char*> types) {
  const std::vector<int> readers = c.Consumers(i, var);
  if (readers.size() != 1 || c.IsOutput(var)) return -1;
  const int j = readers[0];
  const Unit* unit = unit_of[j] >= 0 ? units[unit_of[j]].get() : nullptr;
  if (unit == nullptr || PendingOpOf(*unit) != j || c.Excluded(step, j)) return -1;
  for (const char* t : types) {
    if (c.type(j) == t) return j;
  }
  return -1;
}

bool NothingBetweenTouches(const Units& units, int from, int to, const std::set<std::string>& reads,
                           const std::set<std::string>& writes, const std::set<int>& fused) {
  for (int u = from + 1; u < to; ++u) {
    if (!units[u] || fused.count(u)) continue;
    for (const auto& w : units[u]->writes()) {
      if (reads.count(w) || writes.count(w)) return false;
    }
    for (const auto& r : units[u]->reads()) {
      if (writes.count(r)) return false;
    }
  }
  return true;
}

std::string OpList(const Cluster& c, const std::vector<int>& ops) {
  std::string s;
  for (int op : ops) s += (s.empty() ? "#" : ", #") + std::to_string(op) + " " + c.type(op);
  return s;
}

void Compact(Units* units) {
  units->erase(std::remove(units->begin(), units->end(), nullptr), units->end());
}

}  // namespace kiln::jit
