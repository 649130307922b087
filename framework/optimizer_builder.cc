#include "framework/optimizer_builder.h"

#include <cmath>

#include "framework/grad_merge.h"
#include "framework/op_desc.h"
#include "framework/operator.h"
#include "framework/suggest.h"

namespace kiln {
namespace {

void CheckConfig(const OptimizerConfig& c) {
  if (!(std::isfinite(c.lr) && c.lr > 0)) ThrowInvalidArgument("learning rate must be finite and > 0, got ", c.lr);
  if (c.kind == OptimizerKind::kMomentum && !(c.momentum >= 0 && c.momentum < 1)) {
    ThrowInvalidArgument("momentum must be in [0, 1), got ", c.momentum);
  }
  if (!(std::isfinite(c.weight_decay) && c.weight_decay >= 0)) {
    ThrowInvalidArgument("weight_decay must be finite and >= 0, got ", c.weight_decay);
  }
  if (!(std::isfinite(c.grad_clip_norm) && c.grad_clip_norm >= 0)) {
    ThrowInvalidArgument("grad_clip_norm (ClipGradByGlobalNorm's clip_norm) must be finite and > 0 (0: no clipping), "
                         "got ", c.grad_clip_norm);
  }
  if (std::isnan(c.grad_clip_min) || std::isnan(c.grad_clip_max) || !(c.grad_clip_min < c.grad_clip_max)) {
    ThrowInvalidArgument("gradient clipping by value: min must be below max, got min ", c.grad_clip_min, ", max ",
                         c.grad_clip_max);
  }
  if (c.kind == OptimizerKind::kAdam || c.kind == OptimizerKind::kAdamW) {
    if (!(c.beta1 >= 0 && c.beta1 < 1)) ThrowInvalidArgument("adam beta1 must be in [0, 1), got ", c.beta1);
    if (!(c.beta2 >= 0 && c.beta2 < 1)) ThrowInvalidArgument("adam beta2 must be in [0, 1), got ", c.beta2);
    if (!(c.epsilon > 0)) ThrowInvalidArgument("adam epsilon must be > 0, got ", c.epsilon);
  }
  if (c.grad_merge_steps < 1) ThrowInvalidArgument("gradient merge: k_steps must be >= 1, got ", c.grad_merge_steps);
}

proto::OpDesc UpdateOp(ProgramBuilder& b, const std::string& p, const std::string& g, const std::string& lr,
                       const OptimizerConfig& c) {
  const Dims dims = b.VarDimsOf(p);
  // Decay attributes only when there is decay: programs without it (and
  // their fingerprints) stay as they were.
  const float decay = c.no_decay.count(p) ? 0.f : c.weight_decay;
  switch (c.kind) {
    case OptimizerKind::kSgd: {
      OpBuilder op("sgd");
      op.In("Param", {p}).In("Grad", {g}).In("LearningRate", {lr}).Out("ParamOut", {p});
      if (decay != 0.f) op.Attr("regularization_coeff", decay);
      return op.Build();
    }
    case OptimizerKind::kMomentum: {
      const std::string v = b.Persistable(p + ".velocity", dims, 0.f);
      OpBuilder op("momentum");
      op.In("Param", {p}).In("Grad", {g}).In("Velocity", {v}).In("LearningRate", {lr});
      op.Out("ParamOut", {p}).Out("VelocityOut", {v}).Attr("mu", c.momentum);
      // Attributes at their op default stay out, so the built-in models'
      // programs (and their fingerprints) do not change.
      if (c.use_nesterov) op.Attr("use_nesterov", true);
      if (decay != 0.f) op.Attr("regularization_coeff", decay);
      return op.Build();
    }
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: {
      const bool adamw = c.kind == OptimizerKind::kAdamW;
      const std::string m1 = b.Persistable(p + ".moment1", dims, 0.f);
      const std::string m2 = b.Persistable(p + ".moment2", dims, 0.f);
      const std::string p1 = b.Persistable(p + ".beta1_pow", {1}, c.beta1);
      const std::string p2 = b.Persistable(p + ".beta2_pow", {1}, c.beta2);
      OpBuilder op(adamw ? "adamw" : "adam");
      op.In("Param", {p}).In("Grad", {g}).In("Moment1", {m1}).In("Moment2", {m2}).In("LearningRate", {lr});
      op.In("Beta1Pow", {p1}).In("Beta2Pow", {p2});
      op.Out("ParamOut", {p}).Out("Moment1Out", {m1}).Out("Moment2Out", {m2});
      op.Out("Beta1PowOut", {p1}).Out("Beta2PowOut", {p2});
      op.Attr("beta1", c.beta1).Attr("beta2", c.beta2);
      if (c.epsilon != 1e-8f) op.Attr("epsilon", c.epsilon);
      // adamw always states its coeff (the op's default is Paddle's 0.01).
      if (adamw) op.Attr("coeff", decay);
      if (!adamw && decay != 0.f) op.Attr("regularization_coeff", decay);
      return op.Build();
    }
  }
  KILN_CHECK(false, "unhandled optimizer kind");
}

// The update op with the gradient clipping of `c`: GradScale reads the global
// norm's factor (`scale`, "" without), and the value bounds where finite.
proto::OpDesc ClippedUpdateOp(ProgramBuilder& b, const std::string& p, const std::string& g, const std::string& lr,
                              const std::string& scale, const OptimizerConfig& c) {
  proto::OpDesc op = UpdateOp(b, p, g, lr, c);
  if (!scale.empty()) SetInput(&op, "GradScale", {scale});
  if (std::isfinite(c.grad_clip_min)) SetAttr(&op, "grad_clip_min", Attribute(c.grad_clip_min));
  if (std::isfinite(c.grad_clip_max)) SetAttr(&op, "grad_clip_max", Attribute(c.grad_clip_max));
  return op;
}

// clip_by_global_norm over every gradient: returns its Scale var.
std::string AppendGlobalNormClip(ProgramBuilder& b, const std::vector<std::pair<std::string, std::string>>& params_grads,
                                 float clip_norm) {
  std::vector<std::string> grads;
  for (const auto& pg : params_grads) grads.push_back(pg.second);
  const std::string scale = b.UniqueName("grad_clip_scale");
  OpBuilder op("clip_by_global_norm");
  op.In("X", grads).Out("Scale", {scale}).Attr("clip_norm", clip_norm);
  proto::OpDesc desc = op.Build();
  SetAttr(&desc, kOpRoleAttr, Attribute(std::string(kOpRoleOptimize)));
  b.RawOp(desc);
  return scale;
}

}  // namespace

OptimizerKind ParseOptimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "momentum") return OptimizerKind::kMomentum;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  ThrowInvalidArgument("unknown optimizer '", name, "': expected sgd, momentum, adam or adamw",
                       DidYouMean(name, {"sgd", "momentum", "adam", "adamw"}));
}

std::string AppendOptimizer(ProgramBuilder& b, const std::vector<std::pair<std::string, std::string>>& params_grads,
                            const OptimizerConfig& c) {
  CheckConfig(c);
  std::string lr_name = c.lr_name;
  if (lr_name.empty()) {
    const bool taken = FindVarDesc(b.main().blocks(0), "learning_rate") != nullptr;
    lr_name = taken ? b.UniqueName("learning_rate") : "learning_rate";
  }
  const std::string lr = b.Persistable(lr_name, {1}, c.lr);
  const std::string apply = c.grad_merge_steps > 1 ? AppendGradMergeStep(b, lr, c.grad_merge_steps) : "";
  auto merged = [&](const std::string& p, const std::string& g) {
    return apply.empty() ? g : AppendGradMerge(b, p, g, apply, c.grad_merge_steps, c.grad_merge_avg);
  };
  // The global norm is that of the gradients the updates read (the merged
  // ones under gradient merge, as Paddle clips in the inner optimizer), so
  // every grad_merge goes before it and it before every update. Without
  // clipping each grad_merge stays right before its update.
  std::vector<std::pair<std::string, std::string>> updates = params_grads;
  std::string scale;
  if (c.grad_clip_norm > 0) {
    for (auto& [p, g] : updates) g = merged(p, g);
    scale = AppendGlobalNormClip(b, updates, c.grad_clip_norm);
  }
  for (const auto& [p, g] : updates) {
    const std::string grad = scale.empty() ? merged(p, g) : g;
    proto::OpDesc update = ClippedUpdateOp(b, p, grad, lr, scale, c);
    if (!apply.empty()) SetInput(&update, "Apply", {apply});
    SetAttr(&update, kOpRoleAttr, Attribute(std::string(kOpRoleOptimize)));
    b.RawOp(update);
  }
  return lr;
}

}  // namespace kiln
