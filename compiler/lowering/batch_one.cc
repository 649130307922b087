#include "compiler/lowering/batch_one.h"

#include "compiler/kernels/gemv_kernels.h"
#include "compiler/lowering/matmul_epilogue.h"
#include "compiler/lowering/weight_grad_fold.h"
#include "compiler/kernels/onednn/onednn_kernels.h"

namespace kiln::jit {

GemvMatmulUnit::GemvMatmulUnit(const std::string& step, std::vector<int> ops, int64_t k, int64_t n, bool relu,
                               std::vector<std::string> args)
    : Unit(step, std::move(ops), std::set<std::string>(args.begin(), args.end() - 1), {args.back()}),
      k_(k),
      n_(n),
      relu_(relu),
      args_(std::move(args)) {}

std::string GemvMatmulUnit::Describe(const Cluster&) const {
  return "kiln matrix-vector product" + EpilogueText(args_.size() == 4, relu_ ? MatmulActivation::kRelu
                                                                              : MatmulActivation::kNone);
}

std::vector<EmittedKernel> GemvMatmulUnit::Emit(EmitContext& ctx) const {
  EmittedKernel e;
  e.kernel = MakeGemvMatmulKernel(k_, n_, args_.size() == 4, relu_, ctx.KernelName("matmul"));
  e.args = args_;
  e.num_inputs = static_cast<int>(args_.size()) - 1;
  return {e};
}

GemvGradSgdUnit::GemvGradSgdUnit(const std::string& step, std::vector<int> ops, std::vector<std::string> args,
                                 int64_t k, int64_t n)
    : Unit(step, std::move(ops), std::set<std::string>(args.begin(), args.begin() + 4),
           std::set<std::string>(args.begin() + 4, args.end())),
      args_(std::move(args)),
      k_(k),
      n_(n) {}

std::string GemvGradSgdUnit::Describe(const Cluster&) const {
  return std::string("kiln matrix-vector pass over W: ") + (args_.size() == 6 ? "dX and " : "") + "the sgd step";
}

std::vector<EmittedKernel> GemvGradSgdUnit::Emit(EmitContext& ctx) const {
  EmittedKernel e;
  e.kernel = MakeGemvGradSgdKernel(k_, n_, args_.size() == 6, ctx.KernelName("gemv_sgd"));
  e.args = args_;
  e.num_inputs = 4;
  return {e};
}

namespace {

constexpr const char* kStep = kBatchOneStep;

bool Excluded(const Cluster& c, const Unit& u) {
  for (int op : u.ops()) {
    if (c.Excluded(kStep, op)) return true;
  }
  return false;
}

// A one-row matmul without transposes, alpha or GELU.
std::unique_ptr<Unit> ForwardGemv(const OneDnnMatmulUnit& m) {
  const FusedMatmulSpec& s = m.spec();
  const int64_t k = s.x_dims.back();
  if (Numel(s.x_dims) != k || s.transpose_w || s.alpha != 1.f) return nullptr;
  if (s.activation != MatmulActivation::kNone && s.activation != MatmulActivation::kRelu) return nullptr;
  return std::make_unique<GemvMatmulUnit>(kStep, m.ops(), k, s.w_dims[1], s.activation == MatmulActivation::kRelu,
                                          m.args());
}

// A one-row weight-gradient fold; `dx_unit` is the unit before it when that
// computes its dX (it joins the pass over W when dX has X's size).
std::unique_ptr<Unit> BackwardGemv(const Cluster& c, const MatmulSgdUnit& m, const Unit* dx_unit) {
  const MatmulSgdUnit::Operands& o = m.operands();
  if (m.keep_old() || Numel(o.x_dims) != o.x_dims.back()) return nullptr;
  std::vector<std::string> args = {o.x, o.dy, o.lr, o.w};
  if (!o.dx.empty()) {
    if (dx_unit == nullptr || Numel(c.dims(o.dx)) != Numel(o.x_dims)) return nullptr;
    args.push_back(o.dx);
  }
  args.push_back(o.w);
  return std::make_unique<GemvGradSgdUnit>(kStep, m.ops(), args, o.w_dims[0], o.w_dims[1]);
}

}  // namespace

Units UseGemvAtBatchOne(const Cluster& c, Units units, StepTrace& trace) {
  // kiln's gemv kernels multiply in f32: under --amp bf16 one-row matmuls
  // stay oneDNN bf16 products, as they are with the JIT off.
  if (c.options().amp_compute != ComputeType::kF32) return units;
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u] || Excluded(c, *units[u])) continue;
    std::unique_ptr<Unit> gemv;
    if (const auto* m = dynamic_cast<const OneDnnMatmulUnit*>(units[u].get())) {
      gemv = ForwardGemv(*m);
    } else if (const auto* s = dynamic_cast<const MatmulSgdUnit*>(units[u].get())) {
      // The dX unit of the same grad op, when there is one, stands right before.
      Unit* prev = u > 0 && units[u - 1] && units[u - 1]->ops() == std::vector<int>{s->ops().front()}
                       ? units[u - 1].get()
                       : nullptr;
      gemv = BackwardGemv(c, *s, s->operands().dx.empty() ? nullptr : prev);
      if (gemv && !s->operands().dx.empty()) units[u - 1].reset();
    }
    if (!gemv) continue;
    trace.Match(OpList(c, gemv->ops()) + " -> " + gemv->Describe(c));
    units[u] = std::move(gemv);
  }
  Compact(&units);
  return units;
}

}  // namespace kiln::jit
