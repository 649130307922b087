#include "compiler/lowering/batch_one.h"

#include "compiler/kernels/gemv_kernels.h"
#include "compiler/lowering/units/matmul_sgd.h"
#include "compiler/lowering/units/onednn_matmul.h"
#include "compiler/lowering/units/post_ops.h"

namespace kiln::jit {
namespace {

std::set<std::string> Reads(const GemvMatmulUnit::Operands& o) {
  std::set<std::string> r = {o.x, o.w};
  if (!o.bias.empty()) r.insert(o.bias);
  return r;
}

std::set<std::string> Written(const GemvGradSgdUnit::Operands& o) {
  std::set<std::string> w = {o.w};
  if (!o.dx.empty()) w.insert(o.dx);
  return w;
}

}  // namespace

GemvMatmulUnit::GemvMatmulUnit(const std::string& step, std::vector<int> ops, int64_t k, int64_t n, bool relu,
                               Operands operands)
    : Unit(step, std::move(ops), Reads(operands), {operands.out}), k_(k), n_(n), relu_(relu), o_(std::move(operands)) {}

std::string GemvMatmulUnit::Describe(const Cluster&) const {
  return "kiln matrix-vector product" +
         EpilogueText(!o_.bias.empty(), relu_ ? MatmulActivation::kRelu : MatmulActivation::kNone);
}

std::vector<EmittedKernel> GemvMatmulUnit::Emit(EmitContext& ctx) const {
  EmittedKernel e;
  e.kernel = MakeGemvMatmulKernel(k_, n_, !o_.bias.empty(), relu_, ctx.KernelName("matmul"));
  e.args = {o_.x, o_.w};
  if (!o_.bias.empty()) e.args.push_back(o_.bias);
  e.num_inputs = static_cast<int>(e.args.size());
  e.args.push_back(o_.out);
  return {e};
}

GemvGradSgdUnit::GemvGradSgdUnit(const std::string& step, std::vector<int> ops, Operands operands, int64_t k,
                                 int64_t n)
    : Unit(step, std::move(ops), {operands.x, operands.dy, operands.lr, operands.w}, Written(operands)),
      o_(std::move(operands)),
      k_(k),
      n_(n) {}

std::string GemvGradSgdUnit::Describe(const Cluster&) const {
  return std::string("kiln matrix-vector pass over W: ") + (o_.dx.empty() ? "" : "dX and ") + "the sgd step";
}

std::vector<EmittedKernel> GemvGradSgdUnit::Emit(EmitContext& ctx) const {
  EmittedKernel e;
  e.kernel = MakeGemvGradSgdKernel(k_, n_, !o_.dx.empty(), ctx.KernelName("gemv_sgd"));
  e.args = {o_.x, o_.dy, o_.lr, o_.w};
  if (!o_.dx.empty()) e.args.push_back(o_.dx);
  e.args.push_back(o_.w);
  e.num_inputs = 4;
  return {e};
}

namespace {

constexpr const char* kStep = kBatchOneStep;

// A one-row matmul without transposes, alpha or GELU.
std::unique_ptr<Unit> ForwardGemv(const OneDnnMatmulUnit& m) {
  const FusedMatmulSpec& s = m.spec();
  const int64_t k = s.x_dims.back();
  if (Numel(s.x_dims) != k || s.transpose_w || s.alpha != 1.f) return nullptr;
  if (s.activation != MatmulActivation::kNone && s.activation != MatmulActivation::kRelu) return nullptr;
  // Under f32 compute (the step's condition) X and W are the vars themselves.
  const OneDnnMatmulUnit::Operands& o = m.operands();
  if (o.x.derived() || o.w.derived()) return nullptr;
  return std::make_unique<GemvMatmulUnit>(kStep, m.ops(), k, s.w_dims[1], s.activation == MatmulActivation::kRelu,
                                          GemvMatmulUnit::Operands{o.x.var, o.w.var, o.bias, o.out});
}

// A one-row weight-gradient fold; `dx_unit` is the unit before it when that
// computes its dX (it joins the pass over W when dX has X's size).
std::unique_ptr<Unit> BackwardGemv(const Cluster& c, const MatmulSgdUnit& m, const Unit* dx_unit) {
  const MatmulSgdUnit::Operands& o = m.operands();
  if (m.keep_old() || o.dy.derived() || Numel(o.x_dims) != o.x_dims.back()) return nullptr;
  if (!o.dx.empty() && (dx_unit == nullptr || Numel(c.dims(o.dx)) != Numel(o.x_dims))) return nullptr;
  return std::make_unique<GemvGradSgdUnit>(kStep, m.ops(), GemvGradSgdUnit::Operands{o.x, o.dy.var, o.lr, o.w, o.dx},
                                           o.w_dims[0], o.w_dims[1]);
}

}  // namespace

Units UseGemvAtBatchOne(const Cluster& c, Units units, StepTrace& trace) {
  // kiln's gemv kernels multiply in f32: under --amp bf16 one-row matmuls
  // stay oneDNN bf16 products, as they are with the JIT off.
  if (c.options().amp_compute != ComputeType::kF32) return units;
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u] || AnyOpExcluded(c, kStep, *units[u])) continue;
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
