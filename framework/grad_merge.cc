#include "framework/grad_merge.h"

#include "framework/op_desc.h"
#include "framework/operator.h"

namespace kiln {
namespace {

// A var of main, with `like`'s dtype and dims, that lives through one step.
std::string DeclareTemp(ProgramBuilder& b, const std::string& name, const proto::VarDesc& like) {
  proto::BlockDesc* block = b.main().mutable_blocks(0);
  if (FindVarDesc(*block, name) != nullptr) ThrowInvalidArgument("gradient merge: variable '", name, "' declared twice");
  proto::VarDesc* v = block->add_vars();
  v->set_name(name);
  v->set_dtype(like.dtype());
  *v->mutable_dims() = like.dims();
  v->set_stop_gradient(true);
  return name;
}

void AppendOptimizeOp(ProgramBuilder& b, proto::OpDesc op) {
  SetAttr(&op, kOpRoleAttr, Attribute(std::string(kOpRoleOptimize)));
  b.RawOp(op);
}

}  // namespace

std::string AppendGradMergeStep(ProgramBuilder& b, const std::string& prefix, int64_t k_steps) {
  if (k_steps < 1) ThrowInvalidArgument("gradient merge: k_steps must be >= 1, got ", k_steps);
  const std::string step = b.Persistable(prefix + ".grad_merge_step", {1}, 0.f);
  const proto::VarDesc flag = RequireVarDesc(b.main().blocks(0), step, "step");
  const std::string apply = DeclareTemp(b, prefix + ".grad_merge_apply", flag);
  OpBuilder op("grad_merge_step");
  op.In("Step", {step}).Out("StepOut", {step}).Out("Apply", {apply}).Attr("k_steps", k_steps);
  AppendOptimizeOp(b, op.Build());
  return apply;
}

std::string AppendGradMerge(ProgramBuilder& b, const std::string& param, const std::string& grad,
                            const std::string& apply, int64_t k_steps, bool avg) {
  const proto::VarDesc g = RequireVarDesc(b.main().blocks(0), grad, "gradient");
  const std::string acc = b.Persistable(param + ".grad_merge", VarDims(g), 0.f, FromProto(g.dtype()));
  const std::string merged = DeclareTemp(b, grad + "@MERGED", g);
  OpBuilder op("grad_merge");
  op.In("Grad", {grad}).In("Acc", {acc}).In("Apply", {apply});
  op.Out("Out", {merged}).Out("AccOut", {acc}).Attr("k_steps", k_steps);
  // Paddle's default (the mean) stays out of the program text.
  if (!avg) op.Attr("avg", false);
  AppendOptimizeOp(b, op.Build());
  return merged;
}

}  // namespace kiln
