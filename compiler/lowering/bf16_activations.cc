#include "compiler/lowering/bf16_activations.h"

#include <memory>
#include <string>
#include <vector>

#include "compiler/lowering/bf16_weight_copies.h"
#include "compiler/lowering/elementwise_groups.h"
#include "compiler/lowering/matmul_epilogue.h"
#include "compiler/lowering/weight_grad_fold.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kBf16ActivationsStep;

// sgd_before_dx's dX = dY W_old^T (a matmul variant reading "<W>@OLD", which
// the step before it wrote) as a oneDNN matmul unit: spec and args (dY,
// W_old, dX).
bool AsDxFromOldWeight(const Cluster& c, const Unit& unit, FusedMatmulSpec* spec, std::vector<std::string>* args) {
  const auto* o = dynamic_cast<const OneDnnOpUnit*>(&unit);
  if (o == nullptr || o->desc(c).type() != "matmul") return false;
  const proto::OpDesc& d = o->desc(c);
  const std::vector<std::string> x = InputArgs(d, "X"), y = InputArgs(d, "Y"), out = OutputArgs(d, "Out");
  const proto::AttrDesc* ty = FindAttr(d, "transpose_Y");
  if (x.size() != 1 || y.size() != 1 || out.size() != 1 || ty == nullptr || !ty->b() ||
      FindAttr(d, "transpose_X") != nullptr || FindAttr(d, "alpha") != nullptr) {
    return false;
  }
  constexpr std::string_view kOld = "@OLD";
  if (y[0].size() <= kOld.size() || y[0].compare(y[0].size() - kOld.size(), kOld.size(), kOld) != 0) return false;
  const Dims xd = c.dims(x[0]), wd = c.dims(y[0].substr(0, y[0].size() - kOld.size()));
  if (wd.size() != 2 || xd.size() < 2 || xd.back() != wd[1]) return false;
  Dims want = xd;
  want.back() = wd[0];
  if (c.dims(out[0]) != want) return false;
  *spec = FusedMatmulSpec{};
  spec->x_dims = xd;
  spec->w_dims = wd;
  spec->transpose_w = true;
  spec->compute = c.options().amp_compute;
  *args = {x[0], y[0], out[0]};
  return true;
}

// The unit that reads `var` at `pos` once it reads "<var>@BF16" instead, or
// null when that reader cannot take a bf16 value.
std::unique_ptr<Unit> BindBf16(const Cluster& c, const Unit& unit, const std::string& var) {
  if (!unit.ops().empty() && c.Excluded(kStep, unit.ops().front())) return nullptr;
  const std::string copy = var + "@BF16";
  FusedMatmulSpec spec;
  std::vector<std::string> args;
  if (AsMatmulUnit(c, unit, &spec, &args) || AsDxFromOldWeight(c, unit, &spec, &args)) {
    if (spec.compute != ComputeType::kBF16) return nullptr;
    // X only: W and the bias stay what they are.
    if (args[0] != var || spec.x_dtype != DataType::kFP32) return nullptr;
    for (size_t a = 1; a < args.size(); ++a) {
      if (args[a] == var) return nullptr;
    }
    spec.x_dtype = DataType::kBF16;
    args[0] = copy;
    return std::make_unique<OneDnnMatmulUnit>(kStep, unit.ops(), spec, args);
  }
  const auto* s = dynamic_cast<const MatmulSgdUnit*>(&unit);
  if (s == nullptr) return nullptr;  // the step runs under bf16 compute only
  MatmulSgdUnit::Operands o = s->operands();
  if (o.dy != var || o.x == var || o.dy_dtype != DataType::kFP32) return nullptr;
  o.dy = copy;
  o.dy_dtype = DataType::kBF16;
  return std::make_unique<MatmulSgdUnit>(kStep, s->ops(), o, s->keep_old());
}

}  // namespace

Units StoreBf16Activations(const Cluster& c, Units units, StepTrace& trace) {
  if (c.options().amp_compute != ComputeType::kBF16 || !c.options().use_onednn || !c.options().fuse_elementwise) {
    return units;
  }
  const VarUses uses(units);
  for (size_t g = 0; g < units.size(); ++g) {
    auto* group = dynamic_cast<EwGroupUnit*>(units[g].get());
    if (group == nullptr || group->ops().empty() || c.Excluded(kStep, group->ops().front())) continue;
    const std::set<std::string> written = group->writes();
    for (const std::string& var : written) {
      if (c.IsOutput(var) || !group->HoldsFull(var) || !c.IsF32(var) || uses.Writers(var).size() != 1) continue;
      std::vector<std::pair<size_t, std::unique_ptr<Unit>>> rebound;
      bool all = true;
      for (const int read_at : uses.Readers(var)) {
        const size_t r = static_cast<size_t>(read_at);
        if (r == g) continue;  // a later fragment of the group reads the register
        std::unique_ptr<Unit> unit = r > g ? BindBf16(c, *units[r], var) : nullptr;
        if (!unit) {
          all = false;
          break;
        }
        rebound.emplace_back(r, std::move(unit));
      }
      if (!all || rebound.empty()) continue;
      group->StoreAsBf16(var);
      std::string ops;
      for (auto& [r, unit] : rebound) {
        ops += (ops.empty() ? "" : "; ") + OpList(c, unit->ops());
        units[r] = std::move(unit);
      }
      trace.Match(OpList(c, group->ops()) + " stores " + var + " in bf16 alone, for " + ops);
    }
  }
  return units;
}

}  // namespace kiln::jit
