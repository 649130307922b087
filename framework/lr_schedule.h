// Learning-rate schedules as ops of the training program (Paddle's
// paddle.optimizer.lr schedules): a persistable step counter, and one
// lr_schedule op that computes the learning-rate var from it and advances it,
// placed first in the program (before the updates that read the learning
// rate). With the JIT on, the op runs inside the compiled cluster that holds
// the updates (JitLowering::kFramework). The counter is
// saved in checkpoints like any optimizer state, so a resumed run continues
// the schedule where it stopped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/program_builder.h"

namespace kiln {

// The lr_schedule op's attributes (docs/ops.md). `kind` is "constant",
// "cosine" (learning_rate, T_max, eta_min), "exponential" (learning_rate,
// gamma), "noam" (learning_rate, d_model, warmup_steps) or "piecewise"
// (boundaries, values); linear_warmup_steps > 0 puts Paddle's LinearWarmup
// (start_lr to end_lr) in front of it, the schedule starting from step 0
// when warmup ends.
struct LrSchedule {
  std::string kind = "constant";
  float learning_rate = 1.0f;
  int64_t T_max = 1;
  float eta_min = 0.0f;
  float gamma = 1.0f;
  float d_model = 1.0f;
  int64_t warmup_steps = 1;
  std::vector<int64_t> boundaries;
  std::vector<float> values;
  int64_t linear_warmup_steps = 0;
  float start_lr = 0.0f;
  float end_lr = 0.0f;
};

// Throws InvalidArgument for an unknown kind or a parameter out of range
// (T_max, warmup_steps, d_model <= 0; gamma <= 0; boundaries not
// increasing or not one fewer than values; a negative warmup).
void CheckLrSchedule(const LrSchedule& s);

// kiln train --lr_schedule: "KIND[:KEY=VALUE[,KEY=VALUE]]" over the base
// learning rate `lr`. KIND is cosine (T_max, eta_min), exponential (gamma),
// piecewise (boundaries=N/N, values=F/F/F: the rates themselves), noam
// (d_model, warmup_steps; scaled by lr) or warmup (a constant lr); any kind
// takes warmup=N and start_lr (default 0): a linear warmup from start_lr to
// lr first. Throws InvalidArgument naming the spec for an unknown kind or
// key, a malformed value, or what CheckLrSchedule refuses.
LrSchedule ParseLrSchedule(const std::string& spec, float lr);

// Declares "<lr>.step" (persistable fp32 [1], 0 in the startup program) and
// inserts an lr_schedule op with op_role "lr_sched" that writes `lr` as the
// first op of b.main() (so before every op that reads `lr`, the ones
// appended later included). When the updates reading `lr` merge gradients
// (grad_merge.h), the op reads their Apply flag, sits right after the flag's
// producer, and the step counts updates, not steps run.
// Returns the step var. Throws InvalidArgument (CheckLrSchedule) changing
// nothing, when main does not declare `lr`, or when only some of its
// updates merge gradients.
std::string AppendLrSchedule(ProgramBuilder& b, const std::string& lr, const LrSchedule& s);

}  // namespace kiln
