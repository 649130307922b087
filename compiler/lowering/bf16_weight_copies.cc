#include "compiler/lowering/bf16_weight_copies.h"

#include <map>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/codegen/ew_runtime_kernel.h"
#include "compiler/lowering/matmul_epilogue.h"
#include "framework/op_desc.h"

namespace kiln::jit {

Bf16WeightCopyUnit::Bf16WeightCopyUnit(const std::string& step, std::string w, std::vector<int> reader_ops,
                                       int readers)
    : Unit(step, {}, {w}, {w + "@BF16"}),
      w_(std::move(w)),
      copy_(w_ + "@BF16"),
      reader_ops_(std::move(reader_ops)),
      readers_(readers) {}

std::string Bf16WeightCopyUnit::Describe(const Cluster&) const {
  return w_ + " converted to bf16 once, for the " + std::to_string(readers_) + " bf16 matmuls that read it";
}

std::vector<EmittedKernel> Bf16WeightCopyUnit::Emit(EmitContext& ctx) const {
  const Cluster& c = ctx.cluster();
  const int64_t n = Numel(c.dims(w_));
  EwProgram program;
  program.Store(0, program.Load(0));
  EwLayout layout = CollapseLayout({n}, {{n}}, {{n}});
  layout.outputs[0].elem = EwElem::kBF16;
  const Isa isa = c.options().isa;
  auto kernel = std::make_shared<jit::FusedElementwiseKernel>(ctx.KernelName("bf16_copy"), program, layout, isa);
  kernel->Create();
  EmittedKernel k;
  k.kernel = MakeEwRuntimeKernel(kernel, std::string("generated ") + IsaName(isa) + " kernel, " + w_ +
                                             " to bf16 (" + Bf16StoreName(kernel->bf16_store()) + ") over " +
                                             layout.ToString());
  k.args = {w_, copy_};
  k.num_inputs = 1;
  proto::VarDesc v = c.var(w_);
  v.set_name(copy_);
  v.set_persistable(false);
  v.set_dtype(proto::BF16);
  k.new_vars.push_back(v);
  return {k};
}

namespace {

constexpr const char* kStep = kBf16WeightCopiesStep;

// A reader of W this step can rewrite to bind a bf16 copy: the spec and args
// (X, W[, bias], Out) of the matmul unit it becomes.
struct Reader {
  size_t pos = 0;
  FusedMatmulSpec spec;
  std::vector<std::string> args;
  std::vector<int> ops;
};

bool AsReader(const Cluster& c, const Unit& unit, size_t pos, Reader* r) {
  if (!unit.ops().empty() && c.Excluded(kStep, unit.ops().front())) return false;
  FusedMatmulSpec spec;
  std::vector<std::string> args;
  if (!AsMatmulUnit(c, unit, &spec, &args)) return false;
  if (spec.compute != ComputeType::kBF16 || spec.w_dtype != DataType::kFP32) return false;
  *r = Reader{pos, spec, args, unit.ops()};
  return true;
}

}  // namespace

bool AsMatmulUnit(const Cluster& c, const Unit& unit, FusedMatmulSpec* spec, std::vector<std::string>* args) {
  if (const auto* m = dynamic_cast<const OneDnnMatmulUnit*>(&unit)) {
    *spec = m->spec();
    *args = m->args();
    return true;
  }
  // The input gradient alone: dX = dY W^T.
  const auto* o = dynamic_cast<const OneDnnOpUnit*>(&unit);
  if (o == nullptr || o->desc(c).type() != "matmul_grad") return false;
  const int i = o->ops().front();
  const std::string dy = c.In(i, GradVarName("Out")), w = c.In(i, "Y"), dx = c.Out(i, GradVarName("X"));
  std::set<std::string> writes = o->writes();
  writes.erase(kEmptyVarName);
  if (dy.empty() || w.empty() || dx.empty() || writes != std::set<std::string>{dx}) return false;
  if (c.Attr<bool>(i, "transpose_X") || c.Attr<bool>(i, "transpose_Y") || c.Attr<float>(i, "alpha") != 1.f) {
    return false;
  }
  const Dims dyd = c.dims(dy), wd = c.dims(w);
  if (!c.IsF32(dy) || !c.IsF32(w) || !c.IsF32(dx) || wd.size() != 2 || dyd.size() < 2 || dyd.back() != wd[1]) {
    return false;
  }
  Dims want = dyd;
  want.back() = wd[0];
  if (c.dims(dx) != want) return false;
  *spec = FusedMatmulSpec{};
  spec->x_dims = dyd;
  spec->w_dims = wd;
  spec->transpose_w = true;
  spec->compute = c.options().amp_compute;
  *args = {dy, w, dx};
  return true;
}

Units CopyBf16Weights(const Cluster& c, Units units, StepTrace& trace) {
  if (c.options().amp_compute != ComputeType::kBF16 || !c.options().use_onednn || !c.options().fuse_elementwise) {
    return units;
  }
  std::map<std::string, std::vector<Reader>> readers;  // by W, in unit order
  for (size_t u = 0; u < units.size(); ++u) {
    Reader r;
    if (AsReader(c, *units[u], u, &r)) readers[r.args[1]].push_back(std::move(r));
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
    auto copy = std::make_unique<Bf16WeightCopyUnit>(kStep, w, reader_ops, static_cast<int>(rs.size()));
    std::string ops;
    for (Reader& r : rs) {
      r.spec.w_dtype = DataType::kBF16;
      r.args[1] = copy->copy();
      ops += (ops.empty() ? "" : "; ") + OpList(c, r.ops);
      units[r.pos] = std::make_unique<OneDnnMatmulUnit>(kStep, r.ops, r.spec, r.args);
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
