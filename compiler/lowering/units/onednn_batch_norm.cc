#include "compiler/lowering/units/onednn_batch_norm.h"

#include <utility>

#include "framework/error.h"

namespace kiln::jit {
namespace {

// The desc of each derived buffer among `bufs` (a temp the unit writes).
void AddNewVars(const Cluster& c, std::initializer_list<const DerivedBuffer*> bufs, EmittedKernel* k) {
  for (const DerivedBuffer* b : bufs) {
    if (b->derived()) k->new_vars.push_back(b->Desc(c));
  }
}

std::string Layouts(const BatchNormSpec& spec, const char* y) {
  return std::string(", ") + y + (spec.y_layout == ActLayout::kPlain ? " plain (reordered)" : " kept");
}

}  // namespace

// ---- OneDnnBatchNormUnit -------------------------------------------------------------

namespace {

std::set<std::string> Written(const OneDnnBatchNormUnit::Operands& o) {
  std::set<std::string> w = {o.y.Name(), o.mean_out, o.variance_out, o.saved_mean, o.saved_variance};
  if (o.mask.derived()) w.insert(o.mask.Name());
  return w;
}

}  // namespace

OneDnnBatchNormUnit::OneDnnBatchNormUnit(const std::string& step, std::vector<int> ops, const BatchNormSpec& spec,
                                         Operands operands)
    : Unit(step, std::move(ops), {operands.x.Name(), operands.scale, operands.bias, operands.mean, operands.variance},
           Written(operands)),
      spec_(spec),
      o_(std::move(operands)) {
  KILN_CHECK(o_.x.kind == DerivedKind::kKeptLayout && o_.x.layout == spec_.layout);
  KILN_CHECK(o_.mask.derived() == spec_.fuse_relu);
  KILN_CHECK((o_.y.kind == DerivedKind::kKeptLayout) == (spec_.y_layout != ActLayout::kPlain));
}

std::string OneDnnBatchNormUnit::Describe(const Cluster&) const {
  return "oneDNN batch norm forward (training)" + std::string(spec_.fuse_relu ? " + relu (fuse_norm_relu)" : "") +
         " reading " + o_.x.Name() + ", writing " + o_.y.Name() + Layouts(spec_, "Y") +
         (spec_.fuse_relu ? " and the relu mask " + o_.mask.Name() : "");
}

std::vector<EmittedKernel> OneDnnBatchNormUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = MakeBatchNormKernel(spec_, ctx.cluster().options().OneDnnSettings(), ctx.KernelName("batch_norm"));
  k.args = {o_.x.Name(), o_.scale, o_.bias, o_.mean, o_.variance};
  k.num_inputs = static_cast<int>(k.args.size());
  for (const std::string& out : {o_.y.Name(), o_.mean_out, o_.variance_out, o_.saved_mean, o_.saved_variance}) {
    k.args.push_back(out);
  }
  if (o_.mask.derived()) k.args.push_back(o_.mask.Name());
  AddNewVars(ctx.cluster(), {&o_.y, &o_.mask}, &k);
  return {k};
}

// ---- OneDnnBatchNormGradUnit ---------------------------------------------------------

namespace {

std::set<std::string> Read(const OneDnnBatchNormGradUnit::Operands& o) {
  std::set<std::string> r = {o.x.Name(), o.scale, o.saved_mean, o.saved_variance, o.dy.Name()};
  if (o.mask.derived()) r.insert(o.mask.Name());
  return r;
}

std::set<std::string> Written(const OneDnnBatchNormGradUnit::Operands& o) {
  std::set<std::string> w = {o.dx.Name()};
  if (!o.dscale.empty()) w.insert(o.dscale);
  if (!o.dbias.empty()) w.insert(o.dbias);
  return w;
}

}  // namespace

OneDnnBatchNormGradUnit::OneDnnBatchNormGradUnit(const std::string& step, std::vector<int> ops,
                                                 const BatchNormSpec& spec, Operands operands)
    : Unit(step, std::move(ops), Read(operands), Written(operands)), spec_(spec), o_(std::move(operands)) {
  KILN_CHECK(o_.x.kind == DerivedKind::kKeptLayout && o_.dx.kind == DerivedKind::kKeptLayout &&
             o_.x.layout == spec_.layout && o_.dx.layout == spec_.layout);
  KILN_CHECK(o_.mask.derived() == spec_.fuse_relu);
  KILN_CHECK((o_.dy.kind == DerivedKind::kKeptLayout) == (spec_.y_layout != ActLayout::kPlain));
}

std::string OneDnnBatchNormGradUnit::Describe(const Cluster&) const {
  std::string s = "oneDNN batch norm backward" + std::string(spec_.fuse_relu ? " with relu's gradient" : "") + ": " +
                  o_.dx.Name();
  if (!o_.dscale.empty()) s += ", " + o_.dscale;
  if (!o_.dbias.empty()) s += ", " + o_.dbias;
  return s + " from " + o_.dy.Name() + Layouts(spec_, "dY") + (spec_.fuse_relu ? " and " + o_.mask.Name() : "");
}

std::vector<EmittedKernel> OneDnnBatchNormGradUnit::Emit(EmitContext& ctx) const {
  EmittedKernel k;
  k.kernel = MakeBatchNormGradKernel(spec_, !o_.dscale.empty(), !o_.dbias.empty(), ctx.cluster().options().OneDnnSettings(),
                                     ctx.KernelName("batch_norm_grad"));
  k.args = {o_.x.Name(), o_.scale, o_.saved_mean, o_.saved_variance, o_.dy.Name()};
  if (o_.mask.derived()) k.args.push_back(o_.mask.Name());
  k.num_inputs = static_cast<int>(k.args.size());
  k.args.push_back(o_.dx.Name());
  if (!o_.dscale.empty()) k.args.push_back(o_.dscale);
  if (!o_.dbias.empty()) k.args.push_back(o_.dbias);
  AddNewVars(ctx.cluster(), {&o_.dx}, &k);
  return {k};
}

}  // namespace kiln::jit
