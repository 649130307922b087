#include "compiler/lowering/blocked_layout.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/lowering/units/blocked.h"
#include "compiler/lowering/units/max_pool_grad.h"
#include "compiler/lowering/units/onednn_conv.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kBlockedLayoutStep;

// The one unit reading `var`, when `var` stays in the cluster and `writer`
// alone writes it; else -1.
int OnlyReader(const Cluster& c, const VarUses& uses, const std::string& var, int writer) {
  if (var.empty() || c.IsOutput(var) || uses.Writers(var) != std::vector<int>{writer}) return -1;
  const std::vector<int>& readers = uses.Readers(var);
  return readers.size() == 1 ? readers.front() : -1;
}

// The op of a pending unit of type `type`, else -1.
int PendingOfType(const Cluster& c, const Units& units, int u, const char* type) {
  if (u < 0) return -1;
  const int op = PendingOpOf(*units[u]);
  return op >= 0 && c.type(op) == type && !c.Excluded(kStep, op) ? op : -1;
}

// One match: unit positions, ops and vars of the pattern (blocked_layout.h).
struct Chain {
  int conv_u = -1, pool_u = -1, grad_u = -1, relu_u = -1, add_u = -1, gconv_u = -1;
  int pool = -1, pool_grad = -1, relu_grad = -1, add = -1, gconv = -1;
  std::string y, p, dp, dy, ds, db;
  // Under bf16 the pooling gradient kernel sums the bias gradient (in f32,
  // before it rounds ds to bf16); else oneDNN's f32 weights pass does.
  bool bias_in_pool_grad = false;
};

// The forward half at conv unit `u`: the conv + bias + relu writing y, and
// y's three readers (the pooling, its gradient and relu's gradient).
bool MatchForward(const Cluster& c, const Units& units, const VarUses& uses, int u, Chain* m) {
  const auto* conv = dynamic_cast<const OneDnnConvUnit*>(units[u].get());
  if (conv == nullptr || conv->ops().size() != 3 || AnyOpExcluded(c, kStep, *conv)) return false;
  const FusedConvSpec& spec = conv->spec();
  if (spec.dst_layout != ActLayout::kPlain || !spec.bias || spec.activation != MatmulActivation::kRelu ||
      spec.groups != 1) {
    return false;
  }
  m->conv_u = u;
  m->y = conv->operands().out.var;
  if (c.IsOutput(m->y) || c.dims(m->y).size() != 4 || uses.Writers(m->y) != std::vector<int>{u}) return false;
  const std::vector<int>& readers = uses.Readers(m->y);
  if (readers.size() != 3) return false;
  for (int r : readers) {
    if (PendingOfType(c, units, r, "pool2d") >= 0) m->pool_u = r;
    if (dynamic_cast<const MaxPoolGradUnit*>(units[r].get()) != nullptr) m->grad_u = r;
    if (PendingOfType(c, units, r, "relu_grad") >= 0) m->relu_u = r;
  }
  if (m->pool_u < 0 || m->grad_u < 0 || m->relu_u < 0) return false;
  m->pool = PendingOpOf(*units[m->pool_u]);
  m->relu_grad = PendingOpOf(*units[m->relu_u]);
  const auto& pg = static_cast<const MaxPoolGradUnit&>(*units[m->grad_u]);
  m->pool_grad = pg.ops().front();
  m->p = c.Out(m->pool, "Out");
  const MaxPoolGradUnit::Operands& po = pg.operands();
  m->dp = po.dout;
  m->dy = po.dx;
  return IsMaxPool2x2(c, m->pool) && c.In(m->pool, "X") == m->y && !c.Excluded(kStep, m->pool_grad) &&
         po.x == m->y && po.out == m->p && c.Producer(m->pool_grad, m->p) == m->pool;
}

// The backward half: dy -> relu_grad -> ds -> elementwise_add_grad (the
// bias) -> dz -> conv2d_grad of the same conv, nothing else reading them.
bool MatchBackward(const Cluster& c, const Units& units, const VarUses& uses, Chain* m) {
  const auto& conv = static_cast<const OneDnnConvUnit&>(*units[m->conv_u]);
  const OneDnnConvUnit::Operands& co = conv.operands();
  const int r = m->relu_grad;
  if (OnlyReader(c, uses, m->dy, m->grad_u) != m->relu_u || c.In(r, "Out") != m->y ||
      c.In(r, GradVarName("Out")) != m->dy || !c.IsF32(m->dy)) {
    return false;
  }
  m->ds = c.Out(r, GradVarName("X"));
  m->add_u = OnlyReader(c, uses, m->ds, m->relu_u);
  m->add = PendingOfType(c, units, m->add_u, "elementwise_add_grad");
  if (m->add < 0 || c.In(m->add, GradVarName("Out")) != m->ds || c.In(m->add, "Y") != co.bias ||
      c.Attr<int64_t>(m->add, "axis") != 1) {
    return false;
  }
  const std::string dz = c.Out(m->add, GradVarName("X"));
  m->db = c.Out(m->add, GradVarName("Y"));
  m->gconv_u = OnlyReader(c, uses, dz, m->add_u);
  const int g = m->gconv = PendingOfType(c, units, m->gconv_u, "conv2d_grad");
  if (g < 0 || DerivedBuffer(c.In(g, "Input")) != co.input || c.In(g, "Filter") != co.filter ||
      c.In(g, GradVarName("Output")) != dz || c.Out(g, GradVarName("Filter")).empty() ||
      c.Attr<int64_t>(g, "groups") != 1) {
    return false;
  }
  for (const char* attr : {"strides", "paddings", "dilations"}) {
    if (c.Attr<std::vector<int64_t>>(g, attr) != c.Attr<std::vector<int64_t>>(conv.ops().front(), attr)) return false;
  }
  // relu_grad moves up to the pooling gradient; the bias gradient down to
  // the conv gradient, or under bf16 up to the pooling gradient too.
  std::set<std::string> bias_writes = {dz};
  if (!m->db.empty()) bias_writes.insert(m->db);
  m->bias_in_pool_grad = conv.spec().compute == ComputeType::kBF16 && !m->db.empty();
  const bool bias_moves =
      m->bias_in_pool_grad
          ? NothingBetweenTouches(units, m->grad_u, m->add_u, {}, bias_writes, {m->grad_u, m->relu_u, m->add_u})
          : NothingBetweenTouches(units, m->add_u, m->gconv_u, {m->ds}, bias_writes, {m->add_u, m->gconv_u});
  return bias_moves &&
         NothingBetweenTouches(units, m->grad_u, m->relu_u, {m->y, m->dy}, {m->ds}, {m->grad_u, m->relu_u});
}

void Apply(const Cluster& c, Units& units, const Chain& m, ActLayout layout, StepTrace& trace) {
  const auto& conv = static_cast<const OneDnnConvUnit&>(*units[m.conv_u]);
  FusedConvSpec spec = conv.spec();
  spec.dst_layout = layout;
  OneDnnConvUnit::Operands co = conv.operands();
  const std::vector<int> conv_ops = conv.ops();
  // Under bf16 compute the backward primitives read ds in bf16: the pooling
  // gradient kernel stores it so (the cast fused into its producer).
  const DataType ds_type = spec.compute == ComputeType::kBF16 ? DataType::kBF16 : DataType::kFP32;
  const DerivedBuffer yb = KeptLayoutOf(m.y, layout), dsb = KeptLayoutOf(m.ds, layout, ds_type);
  const ConvGradUnit::Operands ga{co.input, co.filter, dsb, c.Out(m.gconv, GradVarName("Input")),
                                  c.Out(m.gconv, GradVarName("Filter")), m.bias_in_pool_grad ? "" : m.db};
  std::vector<int> grad_ops = {m.pool_grad, m.relu_grad}, gconv_ops = {m.add, m.gconv};
  const Dims yd = c.dims(m.y);
  const DerivedBuffer argmax = PoolArgmaxOf(m.p, layout);
  BlockedMaxPoolGradUnit::Operands go{argmax, m.dp, dsb, "", yd};
  if (m.bias_in_pool_grad) {
    grad_ops.push_back(m.add);
    gconv_ops = {m.gconv};
    go.dbias = m.db;
  }
  co.out = yb;
  units[m.conv_u] = std::make_unique<OneDnnConvUnit>(kStep, conv_ops, spec, co);
  units[m.pool_u] = std::make_unique<BlockedMaxPoolUnit>(kStep, m.pool, BlockedMaxPoolUnit::Operands{yb, m.p, argmax, yd});
  // dy is never stored: the pooling gradient kernel applies relu's.
  units[m.grad_u] = std::make_unique<BlockedMaxPoolGradUnit>(kStep, grad_ops, go, PoolGradThen::kReluGrad);
  units[m.relu_u].reset();
  units[m.gconv_u] = std::make_unique<ConvGradUnit>(kStep, gconv_ops, spec, ga);
  units[m.add_u].reset();
  trace.Match(OpList(c, conv_ops) + ", " + OpList(c, {m.pool, m.pool_grad, m.relu_grad, m.add, m.gconv}) + " -> " +
              m.y + " and " + m.ds + " kept in " + ActLayoutName(layout));
}

// dp kept for the pooling gradient at unit u (blocked_layout.h), if its
// writer, the next conv's data gradient, picks that layout for it.
void KeepPooledGradient(const Cluster& c, Units& units, const VarUses& uses, int u, StepTrace& trace) {
  const auto* pg = dynamic_cast<const BlockedMaxPoolGradUnit*>(units[u].get());
  if (pg == nullptr || pg->operands().dout.derived() || AnyOpExcluded(c, kStep, *pg)) return;
  const std::string dp = pg->operands().dout.var;
  const std::vector<int>& writers = uses.Writers(dp);
  if (c.IsOutput(dp) || !c.IsF32(dp) || writers.size() != 1 || uses.Readers(dp) != std::vector<int>{u}) return;
  const auto* g = dynamic_cast<const ConvGradUnit*>(units[writers.front()].get());
  if (g == nullptr || AnyOpExcluded(c, kStep, *g) || g->operands().input.derived() ||
      g->operands().dinput != DerivedBuffer(dp)) {
    return;
  }
  const ActLayout layout = pg->operands().dx.layout;
  if (ConvBackwardDInputLayout(g->spec(), c.options().OneDnnSettings()) != layout) return;
  ConvGradUnit::Operands go = g->operands();
  BlockedMaxPoolGradUnit::Operands po = pg->operands();
  go.dinput = po.dout = KeptLayoutOf(dp, layout);
  const std::vector<int> gops = g->ops(), pops = pg->ops();
  const PoolGradThen then = pg->then();
  units[writers.front()] = std::make_unique<ConvGradUnit>(kStep, gops, g->spec(), go);
  units[u] = std::make_unique<BlockedMaxPoolGradUnit>(kStep, pops, po, then);
  trace.Match(OpList(c, {gops.back(), pops.front()}) + " -> " + dp + " kept in " + ActLayoutName(layout));
}

}  // namespace

Units KeepBlockedLayout(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().use_onednn || !c.options().fuse_elementwise) return units;
  auto uses = std::make_unique<VarUses>(units);
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u]) continue;
    Chain m;
    if (!MatchForward(c, units, *uses, static_cast<int>(u), &m) || !MatchBackward(c, units, *uses, &m)) continue;
    // The last check: oneDNN's choice for the shape (a primitive descriptor).
    const ActLayout layout =
        ConvForwardDstLayout(static_cast<const OneDnnConvUnit&>(*units[u]).spec(), c.options().OneDnnSettings());
    if (layout == ActLayout::kPlain) continue;
    Apply(c, units, m, layout, trace);
    uses = std::make_unique<VarUses>(units);
  }
  Compact(&units);
  uses = std::make_unique<VarUses>(units);
  for (size_t u = 0; u < units.size(); ++u) KeepPooledGradient(c, units, *uses, static_cast<int>(u), trace);
  return units;
}

}  // namespace kiln::jit
