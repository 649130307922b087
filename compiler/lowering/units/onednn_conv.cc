#include "compiler/lowering/units/onednn_conv.h"

#include "compiler/lowering/units/post_ops.h"

namespace kiln::jit {
namespace {

std::set<std::string> Reads(const OneDnnConvUnit::Operands& o) {
  std::set<std::string> r = {o.input.Name(), o.filter};
  if (!o.bias.empty()) r.insert(o.bias);
  return r;
}

FusedConvSpec WithOperands(FusedConvSpec spec, const OneDnnConvUnit::Operands& o) {
  spec.bias = !o.bias.empty();
  KILN_CHECK(o.out.kind == DerivedKind::kNone || o.out.kind == DerivedKind::kKeptLayout);
  spec.dst_layout = o.out.kind == DerivedKind::kKeptLayout ? o.out.layout : ActLayout::kPlain;
  KILN_CHECK(o.input.kind == DerivedKind::kNone || o.input.kind == DerivedKind::kKeptLayout);
  spec.src_layout = o.input.kind == DerivedKind::kKeptLayout ? o.input.layout : ActLayout::kPlain;
  return spec;
}

}  // namespace

OneDnnConvUnit::OneDnnConvUnit(const std::string& step, std::vector<int> ops, const FusedConvSpec& spec,
                               Operands operands)
    : Unit(step, std::move(ops), Reads(operands), {operands.out.Name()}),
      spec_(WithOperands(spec, operands)),
      o_(std::move(operands)) {}

std::string OneDnnConvUnit::Describe(const Cluster&) const {
  const std::string epilogue = EpilogueText(spec_.bias, spec_.activation);
  return "oneDNN convolution" + std::string(spec_.compute == ComputeType::kBF16 ? " in bf16" : "") +
         (epilogue.empty() ? "" : epilogue + " as post-ops") +
         (spec_.src_layout != ActLayout::kPlain ? std::string(", input kept in ") + ActLayoutName(spec_.src_layout)
                                                : "") +
         (spec_.dst_layout != ActLayout::kPlain ? std::string(", output kept in ") + ActLayoutName(spec_.dst_layout)
                                                : "");
}

std::vector<EmittedKernel> OneDnnConvUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = MakeFusedConvKernel(spec_, ctx.cluster().options().OneDnnSettings(), ctx.KernelName("conv"));
  k.args = {o_.input.Name(), o_.filter};
  if (!o_.bias.empty()) k.args.push_back(o_.bias);
  k.num_inputs = static_cast<int>(k.args.size());
  k.args.push_back(o_.out.Name());
  if (o_.out.derived()) k.new_vars.push_back(o_.out.Desc(ctx.cluster()));
  return {k};
}

}  // namespace kiln::jit
