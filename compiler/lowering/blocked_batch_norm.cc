#include "compiler/lowering/blocked_batch_norm.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/kernels/onednn/batch_norm_kernels.h"
#include "compiler/lowering/units/blocked.h"
#include "compiler/lowering/units/blocked_residual.h"
#include "compiler/lowering/units/onednn_batch_norm.h"
#include "compiler/lowering/units/onednn_conv.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kBlockedBatchNormStep;

// The op of a pending unit of type `type`, else -1.
int PendingOfType(const Cluster& c, const Units& units, int u, const char* type) {
  if (u < 0) return -1;
  const int op = PendingOpOf(*units[u]);
  return op >= 0 && c.type(op) == type && !c.Excluded(kStep, op) ? op : -1;
}

// The one unit reading `var`, when `var` stays in the cluster and `writer`
// alone writes it; else -1.
int OnlyReader(const Cluster& c, const VarUses& uses, const std::string& var, int writer) {
  if (var.empty() || c.IsOutput(var) || uses.Writers(var) != std::vector<int>{writer}) return -1;
  const std::vector<int>& readers = uses.Readers(var);
  return readers.size() == 1 ? readers.front() : -1;
}

// One match: unit positions, ops and vars of the pattern (blocked_batch_norm.h).
struct Chain {
  int conv_u = -1, bn_u = -1, bng_u = -1, gconv_u = -1, relu_u = -1, relug_u = -1;
  int conv = -1, bn = -1, bng = -1, gconv = -1, relu = -1, relug = -1;
  std::string y, dy, z, dz;    // conv out, its gradient; bn Y and its gradient
  std::string r, dr;           // relu's Out and dOut (fused relu)
  FusedConvSpec spec;
  // A conv with a bias (conv_epilogue's unit: conv2d + elementwise_add):
  // its ops, the bias, and the bias gradient's elementwise_add_grad, whose
  // sum the conv gradient's weights pass takes over.
  std::vector<int> conv_ops;
  std::string bias, dbias;
  int addg_u = -1, addg = -1;
};

// conv_epilogue's conv2d + bias (no activation, f32, plain dst): its conv2d
// op in *i, its output in y; -1 otherwise.
int BiasedConv(const Cluster& c, const Units& units, int u, Chain* m) {
  const auto* conv = dynamic_cast<const OneDnnConvUnit*>(units[u].get());
  if (conv == nullptr || !conv->spec().bias || conv->spec().activation != MatmulActivation::kNone ||
      conv->spec().dst_layout != ActLayout::kPlain || conv->spec().src_layout != ActLayout::kPlain ||
      conv->operands().out.derived() || conv->operands().input.derived() || conv->ops().size() != 2 ||
      AnyOpExcluded(c, kStep, *conv)) {
    return -1;
  }
  const int i = conv->ops().front();
  if (c.type(i) != "conv2d" || c.In(i, "Input") != conv->operands().input.var) return -1;
  m->conv_ops = conv->ops();
  m->bias = conv->operands().bias;
  m->y = conv->operands().out.var;
  return i;
}

// conv2d (f32, 4-D; a pending op, or with its bias as conv_epilogue's unit)
// writing y, read by exactly batch_norm and batch_norm_grad.
bool MatchConv(const Cluster& c, const Units& units, const VarUses& uses, int u, Chain* m) {
  int i = m->conv = PendingOfType(c, units, u, "conv2d");
  if (i >= 0) {
    m->y = c.Out(i, "Output");
    m->conv_ops = {i};
  } else {
    i = m->conv = BiasedConv(c, units, u, m);
  }
  if (i < 0) return false;
  const std::string in = c.In(i, "Input"), filter = c.In(i, "Filter");
  if (in.empty() || filter.empty() || m->y.empty() || !c.IsF32(in) || !c.IsF32(filter) || !c.IsF32(m->y)) return false;
  FusedConvSpec& s = m->spec;
  s.input_dims = c.dims(in);
  s.filter_dims = c.dims(filter);
  if (s.input_dims.size() != 4 || s.filter_dims.size() != 4 || c.Attr<int64_t>(i, "groups") != 1) return false;
  s.strides = c.Attr<std::vector<int64_t>>(i, "strides");
  s.paddings = c.Attr<std::vector<int64_t>>(i, "paddings");
  s.dilations = c.Attr<std::vector<int64_t>>(i, "dilations");
  s.compute = c.options().amp_compute;
  s.bias = !m->bias.empty();
  m->conv_u = u;
  if (c.IsOutput(m->y) || uses.Writers(m->y) != std::vector<int>{u}) return false;
  const std::vector<int>& readers = uses.Readers(m->y);
  if (readers.size() != 2) return false;
  for (int r : readers) {
    if (PendingOfType(c, units, r, "batch_norm") >= 0) m->bn_u = r;
    if (PendingOfType(c, units, r, "batch_norm_grad") >= 0) m->bng_u = r;
  }
  return m->bn_u >= 0 && m->bng_u >= 0;
}

// The batch norm pair on y (training, the gradient reading the forward's
// saved statistics) and the conv2d_grad of the same conv reading dy alone.
bool MatchNormAndGrad(const Cluster& c, const Units& units, const VarUses& uses, Chain* m) {
  const int b = m->bn = PendingOpOf(*units[m->bn_u]);
  const int g = m->bng = PendingOpOf(*units[m->bng_u]);
  if (c.In(b, "X") != m->y || c.In(g, "X") != m->y || c.Attr<bool>(b, "is_test") || c.Attr<bool>(g, "is_test") ||
      c.Attr<float>(b, "epsilon") != c.Attr<float>(g, "epsilon") || c.In(b, "Scale") != c.In(g, "Scale")) {
    return false;
  }
  for (const char* slot : {"Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"}) {
    if (c.Out(b, slot).empty()) return false;
  }
  for (const char* slot : {"SavedMean", "SavedVariance"}) {
    if (c.In(g, slot) != c.Out(b, slot) || c.Producer(g, c.In(g, slot)) != b) return false;
  }
  m->z = c.Out(b, "Y");
  m->dz = c.In(g, GradVarName("Y"));
  m->dy = c.Out(g, GradVarName("X"));
  if (m->dz.empty() || !c.IsF32(m->dz)) return false;
  m->gconv_u = OnlyReader(c, uses, m->dy, m->bng_u);
  std::string dconv = m->dy;  // what conv2d_grad reads: dy, or the bias gradient's X@GRAD
  if (!m->bias.empty()) {
    m->addg_u = m->gconv_u;
    const int a = m->addg = PendingOfType(c, units, m->addg_u, "elementwise_add_grad");
    if (a < 0 || c.In(a, GradVarName("Out")) != m->dy || c.In(a, "Y") != m->bias || c.Attr<int64_t>(a, "axis") != 1) {
      return false;
    }
    dconv = c.Out(a, GradVarName("X"));
    m->dbias = c.Out(a, GradVarName("Y"));
    m->gconv_u = OnlyReader(c, uses, dconv, m->addg_u);
  }
  const int gc = m->gconv = PendingOfType(c, units, m->gconv_u, "conv2d_grad");
  if (gc < 0 || c.In(gc, "Input") != c.In(m->conv, "Input") || c.In(gc, "Filter") != c.In(m->conv, "Filter") ||
      c.In(gc, GradVarName("Output")) != dconv || c.Out(gc, GradVarName("Filter")).empty() ||
      c.Attr<int64_t>(gc, "groups") != 1) {
    return false;
  }
  for (const char* attr : {"strides", "paddings", "dilations"}) {
    if (c.Attr<std::vector<int64_t>>(gc, attr) != c.Attr<std::vector<int64_t>>(m->conv, attr)) return false;
  }
  // The bias gradient moves down to the conv gradient (its weights pass).
  std::set<std::string> bias_writes = {dconv};
  if (!m->dbias.empty()) bias_writes.insert(m->dbias);
  return m->bias.empty() ||
         NothingBetweenTouches(units, m->addg_u, m->gconv_u, {m->dy}, bias_writes, {m->addg_u, m->gconv_u});
}

// The relu_grad that alone writes `dx`, read by unit `reader` alone, from
// `out` (its relu's Out) and an f32 gradient of `out`: sets *u, *op and
// *dout as it matches; false otherwise.
bool MatchReluGrad(const Cluster& c, const Units& units, const VarUses& uses, const std::string& dx,
                   const std::string& out, int reader, int* u, int* op, std::string* dout) {
  const std::vector<int>& writers = uses.Writers(dx);
  if (writers.size() != 1) return false;
  *u = writers.front();
  *op = PendingOfType(c, units, *u, "relu_grad");
  if (*op < 0 || OnlyReader(c, uses, dx, *u) != reader || c.In(*op, "Out") != out ||
      c.Out(*op, GradVarName("X")) != dx) {
    return false;
  }
  *dout = c.In(*op, GradVarName("Out"));
  return !dout->empty() && c.IsF32(*dout);
}

// The relu on z alone and its gradient writing dz for the batch norm's
// gradient alone; false (no fusion) otherwise.
bool MatchRelu(const Cluster& c, const Units& units, const VarUses& uses, Chain* m) {
  m->relu_u = OnlyReader(c, uses, m->z, m->bn_u);
  m->relu = PendingOfType(c, units, m->relu_u, "relu");
  if (m->relu < 0 || c.In(m->relu, "X") != m->z) return false;
  m->r = c.Out(m->relu, "Out");
  if (m->r.empty() || uses.Writers(m->r) != std::vector<int>{m->relu_u}) return false;
  // relu runs with the batch norm (moved up), relu_grad with its gradient
  // (moved down).
  return MatchReluGrad(c, units, uses, m->dz, m->r, m->bng_u, &m->relug_u, &m->relug, &m->dr) &&
         NothingBetweenTouches(units, m->bn_u, m->relu_u, {m->z}, {m->r}, {m->bn_u, m->relu_u}) &&
         NothingBetweenTouches(units, m->relug_u, m->bng_u, {m->dr}, {m->dz}, {m->relug_u, m->bng_u});
}

// A residual sum relu(z + s) of z alone, s plain of z's dims, and its
// gradient writing dz alone for the batch norm's gradient: relu_grad, then
// elementwise_add_grad (blocked_batch_norm.h). False otherwise.
struct Residual {
  int add_u = -1, relu_u = -1, relug_u = -1, addg_u = -1;
  int add = -1, relu = -1, relug = -1, addg = -1;
  std::string s, sum, out, dsum, dout, ds;  // ds: the shortcut's gradient, "" when none
};

bool MatchResidual(const Cluster& c, const Units& units, const VarUses& uses, const Chain& m, Residual* r) {
  r->add_u = OnlyReader(c, uses, m.z, m.bn_u);
  const int a = r->add = PendingOfType(c, units, r->add_u, "elementwise_add");
  if (a < 0) return false;
  const bool z_is_x = c.In(a, "X") == m.z;
  r->s = z_is_x ? c.In(a, "Y") : c.In(a, "X");
  if ((!z_is_x && c.In(a, "Y") != m.z) || r->s == m.z || r->s.empty() || !c.IsF32(r->s) ||
      c.dims(r->s) != c.dims(m.z)) {
    return false;
  }
  r->sum = c.Out(a, "Out");
  r->relu_u = OnlyReader(c, uses, r->sum, r->add_u);
  r->relu = PendingOfType(c, units, r->relu_u, "relu");
  if (r->relu < 0 || c.In(r->relu, "X") != r->sum) return false;
  r->out = c.Out(r->relu, "Out");
  const std::vector<int>& dz_writers = uses.Writers(m.dz);
  if (r->out.empty() || uses.Writers(r->out) != std::vector<int>{r->relu_u} || dz_writers.size() != 1) return false;
  r->addg_u = dz_writers.front();
  const int g = r->addg = PendingOfType(c, units, r->addg_u, "elementwise_add_grad");
  if (g < 0 || c.Out(g, GradVarName(z_is_x ? "X" : "Y")) != m.dz || OnlyReader(c, uses, m.dz, r->addg_u) != m.bng_u) {
    return false;
  }
  r->ds = c.Out(g, GradVarName(z_is_x ? "Y" : "X"));
  r->dsum = c.In(g, GradVarName("Out"));
  // relu runs with the sum (moved up), relu_grad with the sum's gradient
  // (moved down).
  return MatchReluGrad(c, units, uses, r->dsum, r->out, r->addg_u, &r->relug_u, &r->relug, &r->dout) &&
         NothingBetweenTouches(units, r->add_u, r->relu_u, {r->sum}, {r->out}, {r->add_u, r->relu_u}) &&
         NothingBetweenTouches(units, r->relug_u, r->addg_u, {r->out, r->dout}, {r->dsum}, {r->relug_u, r->addg_u});
}

void ApplyResidual(const Cluster& c, Units& units, const Chain& m, const Residual& r, ActLayout layout,
                   StepTrace& trace) {
  const Dims dims = c.dims(m.z);
  std::vector<int> fwd = {r.add, r.relu}, bwd = {r.relug, r.addg};
  std::sort(fwd.begin(), fwd.end());
  std::sort(bwd.begin(), bwd.end());
  units[r.add_u] = std::make_unique<BlockedResidualUnit>(
      kStep, fwd, BlockedResidualUnit::Operands{KeptLayoutOf(m.z, layout), r.s, r.out, dims});
  units[r.addg_u] = std::make_unique<BlockedResidualGradUnit>(
      kStep, bwd, BlockedResidualGradUnit::Operands{r.out, r.dout, KeptLayoutOf(m.dz, layout), r.ds, dims});
  units[r.relu_u].reset();
  units[r.relug_u].reset();
  trace.Match(OpList(c, {r.add, r.relu, r.relug, r.addg}) + " -> residual sum + relu reading " + m.z +
              " kept, its gradient writing " + m.dz + " kept");
}

BatchNormSpec SpecOf(const Cluster& c, const Chain& m, bool fuse_relu, bool keep_y, ActLayout layout) {
  BatchNormSpec bs;
  bs.x_dims = c.dims(m.y);
  bs.epsilon = c.Attr<float>(m.bn, "epsilon");
  bs.momentum = c.Attr<float>(m.bn, "momentum");
  bs.layout = layout;
  bs.fuse_relu = fuse_relu;
  bs.y_layout = keep_y ? layout : ActLayout::kPlain;
  return bs;
}

void Apply(const Cluster& c, Units& units, const Chain& m, bool fuse_relu, bool keep_y, ActLayout layout,
           StepTrace& trace) {
  FusedConvSpec spec = m.spec;
  spec.dst_layout = layout;
  const std::string in = c.In(m.conv, "Input"), filter = c.In(m.conv, "Filter");
  const DerivedBuffer yb = KeptLayoutOf(m.y, layout), dyb = KeptLayoutOf(m.dy, layout);
  const BatchNormSpec bs = SpecOf(c, m, fuse_relu, keep_y, layout);
  const std::string out = fuse_relu ? m.r : m.z;
  const DerivedBuffer yout = keep_y ? KeptLayoutOf(out, layout) : DerivedBuffer(out);
  const DerivedBuffer dyin = keep_y ? KeptLayoutOf(m.dz, layout) : DerivedBuffer(fuse_relu ? m.dr : m.dz);
  const DerivedBuffer mask = fuse_relu ? ReluMaskOf(out, layout) : DerivedBuffer();
  const int b = m.bn, g = m.bng;
  const OneDnnBatchNormUnit::Operands fo{yb, c.In(b, "Scale"), c.In(b, "Bias"), c.In(b, "Mean"), c.In(b, "Variance"),
                                         yout, c.Out(b, "MeanOut"), c.Out(b, "VarianceOut"), c.Out(b, "SavedMean"),
                                         c.Out(b, "SavedVariance"), mask};
  const OneDnnBatchNormGradUnit::Operands go{yb, c.In(g, "Scale"), c.In(g, "SavedMean"), c.In(g, "SavedVariance"),
                                             dyin, mask, dyb, c.Out(g, GradVarName("Scale")),
                                             c.Out(g, GradVarName("Bias"))};
  const ConvGradUnit::Operands ga{in, filter, dyb, c.Out(m.gconv, GradVarName("Input")),
                                  c.Out(m.gconv, GradVarName("Filter")), m.dbias};
  std::vector<int> fwd_ops = {b}, bwd_ops = {g};
  if (fuse_relu) {
    fwd_ops.push_back(m.relu);
    bwd_ops.insert(bwd_ops.begin(), m.relug);
    if (bwd_ops[0] > bwd_ops[1]) std::swap(bwd_ops[0], bwd_ops[1]);
  }
  units[m.conv_u] = std::make_unique<OneDnnConvUnit>(kStep, m.conv_ops, spec,
                                                     OneDnnConvUnit::Operands{in, filter, m.bias, yb});
  units[m.bn_u] = std::make_unique<OneDnnBatchNormUnit>(kStep, fwd_ops, bs, fo);
  units[m.bng_u] = std::make_unique<OneDnnBatchNormGradUnit>(kStep, bwd_ops, bs, go);
  std::vector<int> gconv_ops = {m.gconv};
  if (m.addg >= 0) {
    gconv_ops.insert(gconv_ops.begin(), m.addg);
    units[m.addg_u].reset();
  }
  units[m.gconv_u] = std::make_unique<ConvGradUnit>(kStep, gconv_ops, spec, ga);
  if (fuse_relu) {
    units[m.relu_u].reset();
    units[m.relug_u].reset();
  }
  std::vector<int> all = m.conv_ops;
  all.insert(all.end(), {b, g, m.gconv});
  if (m.addg >= 0) all.push_back(m.addg);
  if (fuse_relu) all.insert(all.end(), {m.relu, m.relug});
  std::sort(all.begin(), all.end());
  trace.Match(OpList(c, all) + " -> " + m.y + " and " + m.dy + " kept in " + ActLayoutName(layout) +
              (fuse_relu ? ", relu fused into the batch norm" : "") +
              (keep_y ? ", " + out + " and " + m.dz + " kept"
                      : "; " + out + " reordered out, " + (fuse_relu ? m.dr : m.dz) + " reordered in"));
}

}  // namespace

Units KeepBatchNormBlocked(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().use_onednn || !c.options().fuse_elementwise || c.options().amp_compute != ComputeType::kF32) {
    return units;
  }
  auto uses = std::make_unique<VarUses>(units);
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u]) continue;
    Chain m;
    if (!MatchConv(c, units, *uses, static_cast<int>(u), &m) || !MatchNormAndGrad(c, units, *uses, &m)) continue;
    if (c.dims(m.y).size() != 4 || c.Excluded(kStep, m.bn) || c.Excluded(kStep, m.bng)) continue;
    // The last check: oneDNN's choice for the shape (a primitive descriptor).
    const ActLayout layout = ConvForwardDstLayout(m.spec, c.options().OneDnnSettings());
    if (layout == ActLayout::kPlain) continue;
    Chain fused = m;
    // The relu is fused where oneDNN's mask is a bit an element (its jit
    // implementations): a byte an element would outweigh the relu output it
    // saves keeping, which the next conv's gradient keeps anyway.
    const bool fuse_relu = MatchRelu(c, units, *uses, &fused) &&
                           BatchNormReluFits(SpecOf(c, fused, true, false, layout), c.options().OneDnnSettings());
    Residual r;
    const bool residual = !fuse_relu && MatchResidual(c, units, *uses, m, &r);
    Apply(c, units, fuse_relu ? fused : m, fuse_relu, residual, layout, trace);
    if (residual) ApplyResidual(c, units, m, r, layout, trace);
    uses = std::make_unique<VarUses>(units);
  }
  Compact(&units);
  return units;
}

}  // namespace kiln::jit
