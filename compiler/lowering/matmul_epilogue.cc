#include "compiler/lowering/matmul_epilogue.h"

#include "compiler/lowering/epilogue.h"
#include "compiler/lowering/units/onednn_matmul.h"
#include "compiler/lowering/units/post_ops.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kMatmulEpilogueStep;

struct Match {
  FusedMatmulSpec spec;
  std::vector<int> ops;
  OneDnnMatmulUnit::Operands operands;
};

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
  m->spec.compute = c.options().amp_compute;
  // A [N] row added on the last axis, then relu or gelu; a bare matmul (or
  // one with only an activation) stays a oneDNN anchor.
  const int64_t n = m->spec.transpose_w ? wd[0] : wd[1];
  const int64_t last = static_cast<int64_t>(c.dims(out).size()) - 1;
  const EpilogueRule rule{{n}, {-1, last}, /*activation_needs_bias=*/true};
  const Epilogue e = MatchEpilogue(c, units, unit_of, i, out, kStep, rule, {x, w});
  if (e.bias.empty()) return false;
  m->spec.bias = true;
  m->spec.activation = e.activation;
  m->ops = {i};
  m->ops.insert(m->ops.end(), e.ops.begin(), e.ops.end());
  m->operands = {x, w, e.bias, e.result};
  return true;
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
    units[u] = std::make_unique<OneDnnMatmulUnit>(kStep, m.ops, m.spec, m.operands);
  }
  Compact(&units);
  return units;
}

}  // namespace kiln::jit
