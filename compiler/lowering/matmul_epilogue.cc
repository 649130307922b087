#include "compiler/lowering/matmul_epilogue.h"

namespace kiln::jit {

OneDnnMatmulUnit::OneDnnMatmulUnit(const std::string& step, std::vector<int> ops, const FusedMatmulSpec& spec,
                                   std::vector<std::string> args)
    : Unit(step, std::move(ops), std::set<std::string>(args.begin(), args.end() - 1), {args.back()}),
      spec_(spec),
      args_(std::move(args)) {}

std::string EpilogueText(bool bias, MatmulActivation activation) {
  std::string s = bias ? " + bias" : "";
  if (activation == MatmulActivation::kRelu) s += " + relu";
  if (activation == MatmulActivation::kGelu) s += " + gelu";
  if (activation == MatmulActivation::kGeluTanh) s += " + gelu_tanh";
  return s;
}

std::string OneDnnMatmulUnit::Describe(const Cluster&) const {
  return "oneDNN matmul" + EpilogueText(spec_.bias, spec_.activation) + " as post-ops";
}

std::vector<EmittedKernel> OneDnnMatmulUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = MakeFusedMatmulKernel(spec_, ctx.KernelName("matmul"));
  k.args = args_;
  k.num_inputs = static_cast<int>(args_.size()) - 1;
  return {k};
}

namespace {

constexpr const char* kStep = "matmul_epilogue";

struct Match {
  FusedMatmulSpec spec;
  std::vector<int> ops;
  std::vector<std::string> args;  // X, W[, bias], Out
};

// The bias add after matmul `i` (Out [.., N] + Y [N] on the last axis, Y from
// outside the cluster), extending `m`; false when there is none.
bool MatchBias(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i, Match* m) {
  const std::string out = c.Out(i, "Out");
  const int j = OnlyPendingConsumer(c, units, unit_of, i, out, kStep, {"elementwise_add"});
  if (j < 0 || c.In(j, "X") != out) return false;
  const std::string b = c.In(j, "Y");
  const int64_t n = m->spec.transpose_w ? m->spec.w_dims[0] : m->spec.w_dims[1];
  const int64_t axis = c.Attr<int64_t>(j, "axis");
  const int64_t rank = static_cast<int64_t>(c.dims(out).size());
  if (b.empty() || !c.IsF32(b) || c.dims(b) != Dims{n} || (axis != -1 && axis != rank - 1)) return false;
  if (c.Producer(j, b) >= 0) return false;
  m->spec.bias = true;
  m->ops.push_back(j);
  m->args.push_back(b);
  return true;
}

// A relu/gelu reading the sum alone, whose grad does not need the sum.
void MatchActivation(const Cluster& c, const Units& units, const std::vector<int>& unit_of, Match* m,
                     std::string* result) {
  const int j = m->ops.back();
  const int k = OnlyPendingConsumer(c, units, unit_of, j, *result, kStep, {"relu", "gelu"});
  if (k < 0 || c.In(k, "X") != *result) return;
  m->spec.activation = c.type(k) == "relu"               ? MatmulActivation::kRelu
                       : c.Attr<bool>(k, "approximate") ? MatmulActivation::kGeluTanh
                                                        : MatmulActivation::kGelu;
  m->ops.push_back(k);
  *result = c.Out(k, "Out");
}

bool MatchAt(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i, Match* m) {
  const std::string x = c.In(i, "X"), w = c.In(i, "Y"), out = c.Out(i, "Out");
  if (x.empty() || w.empty() || out.empty() || !c.IsF32(x) || !c.IsF32(w)) return false;
  if (c.Attr<bool>(i, "transpose_X")) return false;
  const Dims xd = c.dims(x), wd = c.dims(w);
  if (xd.size() < 2 || wd.size() != 2) return false;
  m->spec.x_dims = xd;
  m->spec.w_dims = wd;
  m->spec.transpose_w = c.Attr<bool>(i, "transpose_Y");
  m->spec.alpha = c.Attr<float>(i, "alpha");
  m->ops = {i};
  m->args = {x, w};
  // A bare matmul stays a framework op.
  if (!MatchBias(c, units, unit_of, i, m)) return false;
  std::string result = c.Out(m->ops.back(), "Out");
  MatchActivation(c, units, unit_of, m, &result);
  m->args.push_back(result);
  // Everything between the matmul and the last folded op must leave the
  // folded vars alone: they all happen at the matmul's place now.
  std::set<std::string> writes;
  for (int op : m->ops) writes.insert(c.writes(op).begin(), c.writes(op).end());
  const std::set<std::string> reads(m->args.begin(), m->args.end() - 1);
  std::set<int> fused;
  for (int op : m->ops) fused.insert(unit_of[op]);
  return NothingBetweenTouches(units, unit_of[i], unit_of[m->ops.back()], reads, writes, fused);
}

}  // namespace

Units FuseMatmulEpilogue(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().use_onednn || !c.options().fuse_elementwise) return units;
  const std::vector<int> unit_of = UnitOfOps(c, units);
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u]) continue;
    const int i = PendingOpOf(*units[u]);
    if (i < 0 || c.type(i) != "matmul" || c.Excluded(kStep, i)) continue;
    Match m;
    if (!MatchAt(c, units, unit_of, i, &m)) continue;
    trace.Match(OpList(c, m.ops) + " -> oneDNN matmul" + EpilogueText(m.spec.bias, m.spec.activation));
    for (int op : m.ops) units[unit_of[op]].reset();
    units[u] = std::make_unique<OneDnnMatmulUnit>(kStep, m.ops, m.spec, m.args);
  }
  Compact(&units);
  return units;
}

}  // namespace kiln::jit
