#include "compiler/lowering/bf16_activations.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/lowering/units/ew_group.h"
#include "compiler/lowering/units/matmul_sgd.h"
#include "compiler/lowering/units/onednn_matmul.h"

namespace kiln::jit {
namespace {

constexpr const char* kStep = kBf16ActivationsStep;

// The unit that reads `var` at `pos` once it reads Bf16CopyOf(var) instead,
// or null when that reader cannot take a bf16 value.
std::unique_ptr<Unit> BindBf16(const Cluster& c, const Unit& unit, const std::string& var) {
  if (!unit.ops().empty() && c.Excluded(kStep, unit.ops().front())) return nullptr;
  if (std::optional<MatmulView> m = AsOneDnnMatmul(c, unit)) {
    if (m->spec.compute != ComputeType::kBF16) return nullptr;
    // X only: W and the bias stay what they are.
    OneDnnMatmulUnit::Operands& o = m->operands;
    if (o.x != DerivedBuffer(var) || o.w.Name() == var || o.bias == var || o.out == var) return nullptr;
    o.x = Bf16CopyOf(var);
    return std::make_unique<OneDnnMatmulUnit>(kStep, unit.ops(), m->spec, o);
  }
  const auto* s = dynamic_cast<const MatmulSgdUnit*>(&unit);
  if (s == nullptr) return nullptr;  // the step runs under bf16 compute only
  MatmulSgdUnit::Operands o = s->operands();
  if (o.dy != DerivedBuffer(var) || o.x == var) return nullptr;
  o.dy = Bf16CopyOf(var);
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
