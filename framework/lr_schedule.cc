#include "framework/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "framework/op_desc.h"
#include "framework/operator.h"
#include "framework/suggest.h"

namespace kiln {

void CheckLrSchedule(const LrSchedule& s) {
  const std::vector<std::string> kinds = {"constant", "cosine", "exponential", "noam", "piecewise"};
  if (std::find(kinds.begin(), kinds.end(), s.kind) == kinds.end()) {
    ThrowInvalidArgument("unknown learning-rate schedule '", s.kind,
                         "': expected constant, cosine, exponential, noam or piecewise", DidYouMean(s.kind, kinds));
  }
  if (!std::isfinite(s.learning_rate)) ThrowInvalidArgument("learning_rate must be finite, got ", s.learning_rate);
  if (s.kind == "cosine" && s.T_max <= 0) ThrowInvalidArgument("CosineAnnealingDecay: T_max must be > 0, got ", s.T_max);
  if (s.kind == "exponential" && !(s.gamma > 0)) ThrowInvalidArgument("ExponentialDecay: gamma must be > 0, got ", s.gamma);
  if (s.kind == "noam" && s.warmup_steps <= 0) {
    ThrowInvalidArgument("NoamDecay: warmup_steps must be > 0, got ", s.warmup_steps);
  }
  if (s.kind == "noam" && !(s.d_model > 0)) ThrowInvalidArgument("NoamDecay: d_model must be > 0, got ", s.d_model);
  if (s.kind == "piecewise") {
    if (s.values.size() != s.boundaries.size() + 1) {
      ThrowInvalidArgument("PiecewiseDecay: expected one more value than boundaries, got ", s.boundaries.size(),
                           " boundaries and ", s.values.size(), " values");
    }
    for (size_t i = 1; i < s.boundaries.size(); ++i) {
      if (s.boundaries[i] <= s.boundaries[i - 1]) {
        ThrowInvalidArgument("PiecewiseDecay: boundaries must increase, got ", s.boundaries[i - 1], " then ",
                             s.boundaries[i]);
      }
    }
  }
  if (s.linear_warmup_steps < 0) {
    ThrowInvalidArgument("LinearWarmup: warmup_steps must be >= 0, got ", s.linear_warmup_steps);
  }
}

std::string AppendLrSchedule(ProgramBuilder& b, const std::string& lr, const LrSchedule& s) {
  CheckLrSchedule(s);
  proto::BlockDesc* block = b.main().mutable_blocks(0);
  if (FindVarDesc(*block, lr) == nullptr) ThrowInvalidArgument("lr_schedule: the program declares no variable '", lr, "'");
  const std::string step = b.Persistable(lr + ".step", {1}, 0.f);
  OpBuilder op("lr_schedule");
  op.In("Step", {step}).Out("LearningRate", {lr}).Out("StepOut", {step}).Attr("kind", s.kind);
  // Only the attributes the kind reads, so the program prints what it means.
  if (s.kind != "piecewise") op.Attr("learning_rate", s.learning_rate);
  if (s.kind == "cosine") op.Attr("T_max", s.T_max).Attr("eta_min", s.eta_min);
  if (s.kind == "exponential") op.Attr("gamma", s.gamma);
  if (s.kind == "noam") op.Attr("d_model", s.d_model).Attr("warmup_steps", s.warmup_steps);
  if (s.kind == "piecewise") op.Attr("boundaries", s.boundaries).Attr("values", s.values);
  if (s.linear_warmup_steps > 0) {
    op.Attr("linear_warmup_steps", s.linear_warmup_steps).Attr("start_lr", s.start_lr).Attr("end_lr", s.end_lr);
  }
  proto::OpDesc desc = op.Build();
  SetAttr(&desc, kOpRoleAttr, Attribute(std::string(kOpRoleLRSched)));
  // The first reader of the learning rate, found before the op is appended.
  int first_reader = block->ops_size();
  for (int i = 0; i < block->ops_size() && first_reader == block->ops_size(); ++i) {
    for (const auto& in : block->ops(i).inputs()) {
      if (std::find(in.args().begin(), in.args().end(), lr) != in.args().end()) first_reader = i;
    }
  }
  b.RawOp(desc);
  auto* ops = block->mutable_ops();
  for (int i = ops->size() - 1; i > first_reader; --i) ops->SwapElements(i, i - 1);
  return step;
}

}  // namespace kiln
