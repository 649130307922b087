#include "compiler/lowering/matmul_epilogue.h"

namespace kiln::jit {

OneDnnMatmulUnit::OneDnnMatmulUnit(const std::string& step, std::vector<int> ops, const FusedMatmulSpec& spec,
                                   std::vector<std::string> args)
    : Unit(step, std::move(ops), std::set<std::string>(args.begin(), args.end() - 1), {args.back()}),
      spec_(spec),
      args_(std::move(args)) {}

std::string OneDnnMatmulUnit::Describe(const Cluster&) const {
  const std::string epilogue = EpilogueText(spec_.bias, spec_.activation);
  return "oneDNN matmul" + std::string(spec_.compute == ComputeType::kBF16 ? " in bf16" : "") +
         (spec_.x_dtype == DataType::kBF16 ? " of " + args_[0] : std::string()) +
         (spec_.w_dtype == DataType::kBF16 ? " on " + args_[1] : std::string()) +
         (spec_.transpose_w ? " transposed" : "") + (epilogue.empty() ? "" : epilogue + " as post-ops");
}

std::vector<EmittedKernel> OneDnnMatmulUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = MakeFusedMatmulKernel(spec_, ctx.KernelName("matmul"));
  k.args = args_;
  k.num_inputs = static_cast<int>(args_.size()) - 1;
  return {k};
}

namespace {

constexpr const char* kStep = kMatmulEpilogueStep;

struct Match {
  FusedMatmulSpec spec;
  std::vector<int> ops;
  std::vector<std::string> args;  // X, W[, bias], Out
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
  m->args = {x, w, e.bias, e.result};
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
    units[u] = std::make_unique<OneDnnMatmulUnit>(kStep, m.ops, m.spec, m.args);
  }
  Compact(&units);
  return units;
}

}  // namespace kiln::jit
