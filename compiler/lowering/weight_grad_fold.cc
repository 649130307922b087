#include "compiler/lowering/weight_grad_fold.h"

#include <cmath>

#include "compiler/lowering/units/matmul_sgd.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kWeightGradFoldStep;

// True when sgd `j` is W -= lr * G and nothing more, the only update the
// fused primitive computes: no L2 decay term (lr * coeff * W), no gradient
// clipping (it needs the scaled or clamped gradient itself) and no select on
// gradient merge's Apply flag (apply_gate.h). Any other sgd stays a
// generated elementwise update.
bool IsPlainSgd(const Cluster& c, int j) {
  return c.Attr<float>(j, "regularization_coeff") == 0.f && c.In(j, "GradScale").empty() &&
         !std::isfinite(c.Attr<float>(j, "grad_clip_min")) && !std::isfinite(c.Attr<float>(j, "grad_clip_max")) &&
         c.In(j, "Apply").empty();
}

// The sgd of matmul_grad `i`'s weight gradient, or -1.
int MatchAt(const Cluster& c, const Units& units, const VarUses& uses, const std::vector<int>& unit_of, int i,
            MatmulSgdUnit::Operands* o) {
  const std::string x = c.In(i, "X"), w = c.In(i, "Y"), dy = c.In(i, GradVarName("Out"));
  const std::string g = c.Out(i, GradVarName("Y"));
  if (x.empty() || w.empty() || dy.empty() || g.empty()) return -1;
  if (c.Attr<bool>(i, "transpose_X") || c.Attr<bool>(i, "transpose_Y") || c.Attr<float>(i, "alpha") != 1.f) return -1;
  if (!c.IsF32(x) || !c.IsF32(w) || !c.IsF32(dy)) return -1;
  const Dims xd = c.dims(x), wd = c.dims(w), dyd = c.dims(dy);
  if (wd.size() != 2 || xd.size() < 2 || xd.back() != wd[0] || dyd.back() != wd[1] ||
      Numel(xd) / xd.back() != Numel(dyd) / dyd.back()) {
    return -1;
  }
  const int j = OnlyPendingConsumer(c, units, unit_of, i, g, kStep, {"sgd"});
  if (j < 0 || c.In(j, "Param") != w || c.Out(j, "ParamOut") != w || c.In(j, "Grad") != g) return -1;
  if (!IsPlainSgd(c, j)) return -1;
  const std::string lr = c.In(j, "LearningRate");
  // The step moves up to the matmul_grad: nothing in between may touch W or
  // write the operands.
  if (!uses.NothingBetweenTouches(unit_of[i], unit_of[j], {x, dy, lr}, {w})) return -1;
  *o = MatmulSgdUnit::Operands{x, dy, lr, w, xd, wd, c.Out(i, GradVarName("X"))};
  return j;
}

}  // namespace

Units FoldWeightGradIntoSgd(const Cluster& c, Units units, StepTrace& trace) {
  if (!c.options().use_onednn || !c.options().fuse_elementwise) return units;
  const std::vector<int> unit_of = UnitOfOps(c, units);
  VarUses uses(units);  // the sgd units taken below leave it
  std::vector<Units> replace(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const int i = units[u] ? PendingOpOf(*units[u]) : -1;
    if (i < 0 || c.type(i) != "matmul_grad" || c.Excluded(kStep, i)) continue;
    MatmulSgdUnit::Operands o;
    const int j = MatchAt(c, units, uses, unit_of, i, &o);
    if (j < 0 || !units[unit_of[j]]) continue;
    trace.Match(OpList(c, {i, j}) + " -> oneDNN matmul W -= lr * X^T dY" +
                (o.dx.empty() ? "" : "; dX stays a matmul_grad without its weight gradient"));
    if (!o.dx.empty()) {
      auto dx_only = std::make_shared<proto::OpDesc>(c.op(i));
      SetOutput(dx_only.get(), GradVarName("Y"), {kEmptyVarName});
      replace[u].push_back(std::make_unique<OneDnnOpUnit>(kStep, c, i, OneDnnOpUnit::Operands{dx_only, {}}));
    }
    replace[u].push_back(std::make_unique<MatmulSgdUnit>(kStep, std::vector<int>{i, j}, o));
    uses.Remove(unit_of[j], *units[unit_of[j]]);
    units[unit_of[j]].reset();
  }
  Units out;
  for (size_t u = 0; u < units.size(); ++u) {
    if (!replace[u].empty()) {
      for (auto& r : replace[u]) out.push_back(std::move(r));
    } else if (units[u]) {
      out.push_back(std::move(units[u]));
    }
  }
  return out;
}

}  // namespace kiln::jit
