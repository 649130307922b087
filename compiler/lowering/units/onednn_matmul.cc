#include "compiler/lowering/units/onednn_matmul.h"

#include "compiler/lowering/units/post_ops.h"
#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

std::set<std::string> Reads(const OneDnnMatmulUnit::Operands& o) {
  std::set<std::string> r = {o.x.Name(), o.w.Name()};
  if (!o.bias.empty()) r.insert(o.bias);
  return r;
}

FusedMatmulSpec WithOperands(FusedMatmulSpec spec, const OneDnnMatmulUnit::Operands& o) {
  spec.x_dtype = o.x.dtype;
  spec.w_dtype = o.w.dtype;
  spec.bias = !o.bias.empty();
  return spec;
}

}  // namespace

OneDnnMatmulUnit::OneDnnMatmulUnit(const std::string& step, std::vector<int> ops, const FusedMatmulSpec& spec,
                                   Operands operands)
    : Unit(step, std::move(ops), Reads(operands), {operands.out}),
      spec_(WithOperands(spec, operands)),
      o_(std::move(operands)) {}

std::string OneDnnMatmulUnit::Describe(const Cluster&) const {
  const std::string epilogue = EpilogueText(spec_.bias, spec_.activation);
  return "oneDNN matmul" + std::string(spec_.compute == ComputeType::kBF16 ? " in bf16" : "") +
         (spec_.x_dtype == DataType::kBF16 ? " of " + o_.x.Name() : std::string()) +
         (spec_.w_dtype == DataType::kBF16 ? " on " + o_.w.Name() : std::string()) +
         (spec_.transpose_w ? " transposed" : "") + (epilogue.empty() ? "" : epilogue + " as post-ops");
}

std::vector<EmittedKernel> OneDnnMatmulUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = MakeFusedMatmulKernel(spec_, ctx.cluster().options().OneDnnSettings(), ctx.KernelName("matmul"));
  k.args = {o_.x.Name(), o_.w.Name()};
  if (!o_.bias.empty()) k.args.push_back(o_.bias);
  k.num_inputs = static_cast<int>(k.args.size());
  k.args.push_back(o_.out);
  return {k};
}

namespace {

// dX = dY W^T as a oneDNN matmul: `w_dims` are those of the var W derives from.
std::optional<MatmulView> DxMatmul(const Cluster& c, const std::string& dy, const DerivedBuffer& w,
                                   const Dims& w_dims, const std::string& dx) {
  const Dims dyd = c.dims(dy);
  if (w_dims.size() != 2 || dyd.size() < 2 || dyd.back() != w_dims[1]) return std::nullopt;
  Dims want = dyd;
  want.back() = w_dims[0];
  if (c.dims(dx) != want) return std::nullopt;
  MatmulView m;
  m.spec.x_dims = dyd;
  m.spec.w_dims = w_dims;
  m.spec.transpose_w = true;
  m.spec.compute = c.options().amp_compute;
  m.operands = {dy, w, "", dx};
  return m;
}

// The input gradient alone, weight_grad_fold's matmul_grad without Y@GRAD.
std::optional<MatmulView> AsDxOnly(const Cluster& c, const OneDnnOpUnit& o) {
  const int i = o.ops().front();
  const std::string dy = c.In(i, GradVarName("Out")), w = c.In(i, "Y"), dx = c.Out(i, GradVarName("X"));
  std::set<std::string> writes = o.writes();
  writes.erase(kEmptyVarName);
  if (dy.empty() || w.empty() || dx.empty() || writes != std::set<std::string>{dx}) return std::nullopt;
  if (c.Attr<bool>(i, "transpose_X") || c.Attr<bool>(i, "transpose_Y") || c.Attr<float>(i, "alpha") != 1.f) {
    return std::nullopt;
  }
  if (!c.IsF32(dy) || !c.IsF32(w) || !c.IsF32(dx)) return std::nullopt;
  return DxMatmul(c, dy, w, c.dims(w), dx);
}

// sgd_before_dx's dX = dY W_old^T: a matmul variant whose Y is the old
// value of a weight (one of the unit's derived inputs).
std::optional<MatmulView> AsDxFromOldWeight(const Cluster& c, const OneDnnOpUnit& o) {
  const proto::OpDesc& d = o.desc(c);
  const std::vector<std::string> x = InputArgs(d, "X"), y = InputArgs(d, "Y"), out = OutputArgs(d, "Out");
  const proto::AttrDesc* ty = FindAttr(d, "transpose_Y");
  if (x.size() != 1 || y.size() != 1 || out.size() != 1 || ty == nullptr || !ty->b() ||
      FindAttr(d, "transpose_X") != nullptr || FindAttr(d, "alpha") != nullptr) {
    return std::nullopt;
  }
  for (const DerivedBuffer& w : o.derived_inputs()) {
    if (w.kind == DerivedKind::kOldValue && w.Name() == y[0]) return DxMatmul(c, x[0], w, c.dims(w.var), out[0]);
  }
  return std::nullopt;
}

}  // namespace

std::optional<MatmulView> AsOneDnnMatmul(const Cluster& c, const Unit& unit) {
  if (const auto* m = dynamic_cast<const OneDnnMatmulUnit*>(&unit)) return MatmulView{m->spec(), m->operands()};
  const auto* o = dynamic_cast<const OneDnnOpUnit*>(&unit);
  if (o == nullptr) return std::nullopt;
  if (o->desc(c).type() == "matmul_grad") return AsDxOnly(c, *o);
  if (o->desc(c).type() == "matmul") return AsDxFromOldWeight(c, *o);
  return std::nullopt;
}

}  // namespace kiln::jit
