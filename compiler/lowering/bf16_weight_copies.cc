#include "compiler/lowering/bf16_weight_copies.h"

#include <map>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/codegen/ew_runtime_kernel.h"
#include "compiler/lowering/units/onednn_matmul.h"

namespace kiln::jit {

Bf16WeightCopyUnit::Bf16WeightCopyUnit(const std::string& step, Operands operands, std::vector<int> reader_ops,
                                       int readers)
    : Unit(step, {}, {operands.w}, {Bf16CopyOf(operands.w).Name()}),
      o_(std::move(operands)),
      reader_ops_(std::move(reader_ops)),
      readers_(readers) {}

std::string Bf16WeightCopyUnit::Describe(const Cluster&) const {
  return o_.w + " converted to bf16 once, for the " + std::to_string(readers_) + " bf16 matmuls that read it";
}

std::vector<EmittedKernel> Bf16WeightCopyUnit::Emit(EmitContext& ctx) const {
  const Cluster& c = ctx.cluster();
  const Isa isa = c.options().isa;
  std::shared_ptr<FusedElementwiseKernel> kernel =
      MakeToBf16Kernel(Numel(c.dims(o_.w)), /*scaled=*/false, isa, ctx.KernelName("bf16_copy"));
  EmittedKernel k;
  k.kernel = MakeEwRuntimeKernel(kernel, std::string("generated ") + IsaName(isa) + " kernel, " + o_.w +
                                             " to bf16 (" + Bf16StoreName(kernel->bf16_store()) + ") over " +
                                             kernel->layout().ToString(),
                                 FlatLayoutOf({false}));
  k.args = {o_.w, copy().Name()};
  k.num_inputs = 1;
  k.new_vars.push_back(copy().Desc(c));
  return {k};
}

namespace {

constexpr const char* kStep = kBf16WeightCopiesStep;

// A reader of W this step can rewrite to bind a bf16 copy: the oneDNN
// matmul unit it is or becomes.
struct Reader {
  size_t pos = 0;
  MatmulView matmul;
  std::vector<int> ops;
};

bool AsReader(const Cluster& c, const Unit& unit, size_t pos, Reader* r) {
  if (!unit.ops().empty() && c.Excluded(kStep, unit.ops().front())) return false;
  std::optional<MatmulView> m = AsOneDnnMatmul(c, unit);
  if (!m || m->spec.compute != ComputeType::kBF16) return false;
  // W a weight itself (not its old value, nor a copy already).
  if (m->operands.w.derived()) return false;
  *r = Reader{pos, std::move(*m), unit.ops()};
  return true;
}

}  // namespace

Units CopyBf16Weights(const Cluster& c, Units units, StepTrace& trace) {
  if (c.options().amp_compute != ComputeType::kBF16 || !c.options().use_onednn || !c.options().fuse_elementwise) {
    return units;
  }
  std::map<std::string, std::vector<Reader>> readers;  // by W, in unit order
  for (size_t u = 0; u < units.size(); ++u) {
    Reader r;
    if (AsReader(c, *units[u], u, &r)) readers[r.matmul.operands.w.var].push_back(std::move(r));
  }
  std::map<size_t, std::unique_ptr<Unit>> copies;  // inserted before these positions
  for (auto& [w, rs] : readers) {
    if (rs.size() < 2 || !c.IsF32(w) || c.dims(w).size() != 2) continue;
    // Nothing from the copy to the last reader may write W.
    bool written = false;
    for (size_t u = rs.front().pos; u <= rs.back().pos && !written; ++u) written = units[u]->writes().count(w) > 0;
    if (written) continue;
    std::vector<int> reader_ops;
    for (const Reader& r : rs) reader_ops.insert(reader_ops.end(), r.ops.begin(), r.ops.end());
    auto copy = std::make_unique<Bf16WeightCopyUnit>(kStep, Bf16WeightCopyUnit::Operands{w}, reader_ops,
                                                     static_cast<int>(rs.size()));
    std::string ops;
    for (Reader& r : rs) {
      r.matmul.operands.w = copy->copy();
      ops += (ops.empty() ? "" : "; ") + OpList(c, r.ops);
      units[r.pos] = std::make_unique<OneDnnMatmulUnit>(kStep, r.ops, r.matmul.spec, r.matmul.operands);
    }
    trace.Match(w + " -> one bf16 copy for " + ops);
    copies[rs.front().pos] = std::move(copy);
  }
  if (copies.empty()) return units;
  Units out;
  for (size_t u = 0; u < units.size(); ++u) {
    auto it = copies.find(u);
    if (it != copies.end()) out.push_back(std::move(it->second));
    out.push_back(std::move(units[u]));
  }
  return out;
}

}  // namespace kiln::jit
