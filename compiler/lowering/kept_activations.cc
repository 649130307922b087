#include "compiler/lowering/kept_activations.h"

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "compiler/lowering/units/blocked.h"
#include "compiler/lowering/units/blocked_residual.h"
#include "compiler/lowering/units/onednn_batch_norm.h"
#include "compiler/lowering/units/onednn_conv.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kKeptActivationsStep;

template <class U>
const U* UnitAt(const Units& units, int u) {
  return u < 0 ? nullptr : dynamic_cast<const U*>(units[u].get());
}

bool Usable(const Cluster& c, const Unit* unit) { return unit != nullptr && !AnyOpExcluded(c, kStep, *unit); }

bool IsPlain(const DerivedBuffer& b, const std::string& var) { return !var.empty() && b == DerivedBuffer(var); }

// One match (kept_activations.h): v, its writer and the unit of its
// gradient, its readers by kind, and the parts of dv.
struct Value {
  std::string v, dv;
  ActLayout layout = ActLayout::kPlain;
  Dims dims;
  int writer = -1, grad = -1;           // a batch norm or a residual sum; its gradient
  std::vector<int> convs, conv_grads;   // readers as src
  std::vector<int> sums, sum_grads;     // residual sums reading v as s; their gradients
  std::vector<std::string> parts;       // the gradients the readers write
  int sum = -1;                         // the `sum` of the parts, when two or more
};

// The unit among `candidates` of kind U that `pred` accepts; -1 if none.
template <class U, class Pred>
int Find(const Units& units, const std::vector<int>& candidates, const Pred& pred) {
  for (int u : candidates) {
    if (const U* unit = UnitAt<U>(units, u); unit != nullptr && pred(*unit)) return u;
  }
  return -1;
}

// v's writer and its gradient: a batch norm writing v plain, or a residual
// sum writing it plain (its gradient reads v as Out).
bool MatchWriter(const Cluster& c, const Units& units, const VarUses& uses, int u, Value* m) {
  if (const auto* bn = UnitAt<OneDnnBatchNormUnit>(units, u)) {
    if (!Usable(c, bn) || bn->spec().y_layout != ActLayout::kPlain) return false;
    m->v = bn->operands().y.var;
    m->layout = bn->spec().layout;
    const DerivedBuffer& x = bn->operands().x;
    m->grad = Find<OneDnnBatchNormGradUnit>(units, uses.Readers(x.Name()), [&](const OneDnnBatchNormGradUnit& g) {
      return g.operands().x == x && g.operands().mask == bn->operands().mask && g.spec().layout == m->layout;
    });
    if (m->grad < 0) return false;
    const DerivedBuffer& dy = UnitAt<OneDnnBatchNormGradUnit>(units, m->grad)->operands().dy;
    m->dv = dy.var;
    if (!IsPlain(bn->operands().y, m->v) || !IsPlain(dy, m->dv)) return false;
  } else if (const auto* sum = UnitAt<BlockedResidualUnit>(units, u)) {
    m->v = sum->operands().out.var;
    m->layout = sum->operands().a.layout;
    if (!Usable(c, sum) || !IsPlain(sum->operands().out, m->v)) return false;
    m->grad = Find<BlockedResidualGradUnit>(units, uses.Readers(m->v), [&](const BlockedResidualGradUnit& g) {
      return IsPlain(g.operands().out, m->v);
    });
    if (m->grad < 0) return false;
    const DerivedBuffer& dout = UnitAt<BlockedResidualGradUnit>(units, m->grad)->operands().dout;
    m->dv = dout.var;
    if (!IsPlain(dout, m->dv)) return false;
  } else {
    return false;
  }
  m->writer = u;
  if (m->v.empty() || m->dv.empty() || c.IsOutput(m->v) || c.IsOutput(m->dv) || !Usable(c, units[m->grad].get()) ||
      uses.Writers(m->v) != std::vector<int>{u}) {
    return false;
  }
  m->dims = c.dims(m->v);
  return m->dims.size() == 4;
}

// A convolution reading v as its src, in f32 with one group, that oneDNN
// would run with its src in v's layout by itself. A kept dst must be of the
// same family (blocked or channels-last): the primitive is made in the
// dst's, and a src of the other would be reordered on every run.
bool ConvReads(const Cluster& c, const OneDnnConvUnit& conv, const Value& m) {
  const FusedConvSpec& s = conv.spec();
  const bool same_family =
      s.dst_layout == ActLayout::kPlain || (s.dst_layout == ActLayout::kNhwc) == (m.layout == ActLayout::kNhwc);
  return IsPlain(conv.operands().input, m.v) && s.compute == ComputeType::kF32 && s.groups == 1 && same_family &&
         ConvForwardSrcLayout(s, c.options().OneDnnSettings()) == m.layout;
}

// Every reader of v: a kind that can read it kept, the parts of dv its
// gradients write.
bool MatchReaders(const Cluster& c, const Units& units, const VarUses& uses, Value* m) {
  for (int r : uses.Readers(m->v)) {
    if (r == m->grad) continue;  // a residual sum's gradient reads its Out
    const Unit* unit = units[r].get();
    if (!Usable(c, unit)) return false;
    if (const auto* conv = UnitAt<OneDnnConvUnit>(units, r)) {
      if (!ConvReads(c, *conv, *m)) return false;
      m->convs.push_back(r);
    } else if (const auto* grad = UnitAt<ConvGradUnit>(units, r)) {
      const ConvGradUnit::Operands& o = grad->operands();
      const FusedConvSpec& s = grad->spec();
      if (!IsPlain(o.input, m->v) || s.compute != ComputeType::kF32 || s.groups != 1) return false;
      if (!o.dinput.var.empty()) {
        if (!IsPlain(o.dinput, o.dinput.var)) return false;
        m->parts.push_back(o.dinput.var);
      }
      m->conv_grads.push_back(r);
    } else if (const auto* sum = UnitAt<BlockedResidualUnit>(units, r)) {
      const BlockedResidualUnit::Operands& o = sum->operands();
      if (!IsPlain(o.s, m->v) || o.a.layout != m->layout) return false;
      const std::string& out = o.out.var;
      const int g = Find<BlockedResidualGradUnit>(
          units, uses.Readers(o.out.Name()), [&](const BlockedResidualGradUnit& u) { return u.operands().out.var == out; });
      if (g < 0 || !Usable(c, units[g].get())) return false;
      const DerivedBuffer& ds = UnitAt<BlockedResidualGradUnit>(units, g)->operands().ds;
      if (!ds.var.empty()) {
        if (!IsPlain(ds, ds.var)) return false;
        m->parts.push_back(ds.var);
      }
      m->sums.push_back(r);
      m->sum_grads.push_back(g);
    } else {
      return false;
    }
  }
  return !m->parts.empty();
}

// dv: the one part, or the `sum` of the parts (each read by it alone);
// read by v's writer's gradient alone.
bool MatchGradient(const Cluster& c, const Units& units, const VarUses& uses, Value* m) {
  if (uses.Readers(m->dv) != std::vector<int>{m->grad} || uses.Writers(m->dv).size() != 1) return false;
  if (m->parts.size() == 1) return m->parts.front() == m->dv;
  const int w = uses.Writers(m->dv).front();
  const int op = PendingOpOf(*units[w]);
  if (op < 0 || c.type(op) != "sum" || c.Excluded(kStep, op) || c.Out(op, "Out") != m->dv) return false;
  std::vector<std::string> xs = InputArgs(c.op(op), "X"), parts = m->parts;
  std::sort(xs.begin(), xs.end());
  std::sort(parts.begin(), parts.end());
  if (xs != parts || std::adjacent_find(xs.begin(), xs.end()) != xs.end()) return false;
  for (const std::string& p : parts) {
    if (c.IsOutput(p) || uses.Writers(p).size() != 1 || uses.Readers(p) != std::vector<int>{w}) return false;
  }
  m->sum = w;
  return true;
}

// The unit at `u` rebuilt for this step from its own operands (and spec),
// changed by `change`.
template <class U, class Change>
void Rewrite(Units& units, int u, const Change& change) {
  const U& unit = *UnitAt<U>(units, u);
  typename U::Operands o = unit.operands();
  change(o);
  if constexpr (std::is_same_v<U, BlockedResidualUnit> || std::is_same_v<U, BlockedResidualGradUnit>) {
    units[u] = std::make_unique<U>(kStep, unit.ops(), o);
  } else {
    units[u] = std::make_unique<U>(kStep, unit.ops(), unit.spec(), o);
  }
}

void RewriteWriter(Units& units, const Value& m, const DerivedBuffer& v, const DerivedBuffer& dv) {
  if (const auto* bn = UnitAt<OneDnnBatchNormUnit>(units, m.writer)) {
    BatchNormSpec bs = bn->spec();
    bs.y_layout = m.layout;
    OneDnnBatchNormUnit::Operands fo = bn->operands();
    fo.y = v;
    const auto& bng = *UnitAt<OneDnnBatchNormGradUnit>(units, m.grad);
    OneDnnBatchNormGradUnit::Operands go = bng.operands();
    go.dy = dv;
    units[m.grad] = std::make_unique<OneDnnBatchNormGradUnit>(kStep, bng.ops(), bs, go);
    units[m.writer] = std::make_unique<OneDnnBatchNormUnit>(kStep, bn->ops(), bs, fo);
    return;
  }
  Rewrite<BlockedResidualUnit>(units, m.writer, [&](BlockedResidualUnit::Operands& o) { o.out = v; });
  Rewrite<BlockedResidualGradUnit>(units, m.grad, [&](BlockedResidualGradUnit::Operands& o) {
    o.out = v;
    o.dout = dv;
  });
}

void Apply(const Cluster& c, Units& units, const Value& m, StepTrace& trace) {
  auto kept = [&](const std::string& var) { return KeptLayoutOf(var, m.layout); };
  const DerivedBuffer v = kept(m.v), dv = kept(m.dv);
  std::vector<int> touched = {m.writer, m.grad};
  RewriteWriter(units, m, v, dv);
  for (int u : m.convs) Rewrite<OneDnnConvUnit>(units, u, [&](OneDnnConvUnit::Operands& o) { o.input = v; });
  for (int u : m.conv_grads) {
    Rewrite<ConvGradUnit>(units, u, [&](ConvGradUnit::Operands& o) {
      o.input = v;
      if (!o.dinput.var.empty()) o.dinput = kept(o.dinput.var);
    });
  }
  for (int u : m.sums) Rewrite<BlockedResidualUnit>(units, u, [&](BlockedResidualUnit::Operands& o) { o.s = v; });
  for (int u : m.sum_grads) {
    Rewrite<BlockedResidualGradUnit>(units, u, [&](BlockedResidualGradUnit::Operands& o) {
      if (!o.ds.var.empty()) o.ds = kept(o.ds.var);
    });
  }
  for (const auto* list : {&m.convs, &m.conv_grads, &m.sums, &m.sum_grads}) {
    touched.insert(touched.end(), list->begin(), list->end());
  }
  if (m.sum >= 0) {
    const int op = PendingOpOf(*units[m.sum]);
    KeptSumUnit::Operands so;
    for (const std::string& x : InputArgs(c.op(op), "X")) so.x.push_back(kept(x));
    so.out = dv;
    so.dims = m.dims;
    units[m.sum] = std::make_unique<KeptSumUnit>(kStep, std::vector<int>{op}, so);
    touched.push_back(m.sum);
  }
  std::vector<int> ops;
  for (int u : touched) ops.insert(ops.end(), units[u]->ops().begin(), units[u]->ops().end());
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  const size_t readers = m.convs.size() + m.conv_grads.size() + m.sums.size();
  trace.Match(OpList(c, ops) + " -> " + m.v + " and " + m.dv + " kept in " + ActLayoutName(m.layout) + " (" +
              std::to_string(readers) + (readers == 1 ? " reader" : " readers") +
              (m.sum >= 0 ? ", the gradient summed kept" : "") + ")");
}

}  // namespace

Units KeepActivations(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().use_onednn || c.options().amp_compute != ComputeType::kF32) return units;
  auto uses = std::make_unique<VarUses>(units);
  for (size_t u = 0; u < units.size(); ++u) {
    Value m;
    if (!MatchWriter(c, units, *uses, static_cast<int>(u), &m) || !MatchReaders(c, units, *uses, &m) ||
        !MatchGradient(c, units, *uses, &m)) {
      continue;
    }
    Apply(c, units, m, trace);
    uses = std::make_unique<VarUses>(units);
  }
  return units;
}

}  // namespace kiln::jit
