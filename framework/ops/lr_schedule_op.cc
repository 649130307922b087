// lr_schedule: the learning rate of Paddle's paddle.optimizer.lr schedules at
// the step held in Step, written to LearningRate, and the step advanced by one
// (StepOut, normally Step itself). One op reads and advances the counter, so
// no other op ever has to be ordered against a write of Step. Under gradient
// merge the optional Apply flag (grad_merge_ops.cc) advances it only on the
// steps that update: the schedule counts updates, as Paddle's does.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

void InferLrSchedule(InferShapeContext& ctx) {
  const DataType dtype = ops_a::CheckFloatInput(ctx, "Step");
  for (int64_t d : ctx.InputDims("Step")) {
    if (d != 1 && d != -1) ctx.Fail("input Step: expected one element ([1]), got ", DimsToString(ctx.InputDims("Step")));
  }
  if (ctx.HasInput("Apply")) {
    ops_a::CheckFloatInput(ctx, "Apply");
    if (Numel(ctx.InputDims("Apply")) > 1) {
      ctx.Fail("input Apply: expected one element ([1]), got ", DimsToString(ctx.InputDims("Apply")));
    }
  }
  ctx.SetOutput("LearningRate", {1}, DataType::kFP32);
  ctx.SetOutput("StepOut", ctx.InputDims("Step"), dtype);
}

// The schedule without its linear warmup, at step t >= 0 (Paddle's closed forms).
double Decayed(const ExecContext& ctx, const std::string& kind, double t) {
  const double lr = ctx.Attr<float>("learning_rate");
  if (kind == "constant") return lr;
  if (kind == "cosine") {
    const double eta_min = ctx.Attr<float>("eta_min");
    const double t_max = static_cast<double>(ctx.Attr<int64_t>("T_max"));
    return eta_min + (lr - eta_min) * (1 + std::cos(M_PI * t / t_max)) / 2;
  }
  if (kind == "exponential") return lr * std::pow(static_cast<double>(ctx.Attr<float>("gamma")), t);
  if (kind == "noam") {
    // Paddle's NoamDecay: min(t^-0.5, t * warmup^-1.5), with t^-0.5 read as 1 at t = 0.
    const double d_model = ctx.Attr<float>("d_model");
    const double warmup = static_cast<double>(ctx.Attr<int64_t>("warmup_steps"));
    const double a = t == 0 ? 1.0 : std::pow(t, -0.5);
    const double b = std::pow(warmup, -1.5) * t;
    return lr * std::pow(d_model, -0.5) * std::min(a, b);
  }
  if (kind == "piecewise") {
    // values[i] while t < boundaries[i]; the last value from the last boundary on.
    const auto& boundaries = ctx.Attr<std::vector<int64_t>>("boundaries");
    const auto& values = ctx.Attr<std::vector<float>>("values");
    if (values.size() != boundaries.size() + 1) {
      ctx.Fail("attribute values: expected ", boundaries.size() + 1, " values (one more than boundaries), got ",
               values.size());
    }
    for (size_t i = 0; i < boundaries.size(); ++i) {
      if (t < static_cast<double>(boundaries[i])) return values[i];
    }
    return values.back();
  }
  ctx.Fail("attribute kind: expected constant, cosine, exponential, noam or piecewise, got '", kind, "'");
}

void LrScheduleKernel(ExecContext& ctx) {
  // The step is read before StepOut (usually the same var) is written.
  const double t = ops_a::ReadScalar(ctx, "Step");
  const bool advance = ctx.InputVar("Apply") == nullptr || ops_a::ReadScalar(ctx, "Apply") != 0;
  const DataType step_dtype = ctx.Input("Step").dtype();
  const std::string kind = ctx.Attr<std::string>("kind");
  const double warmup = static_cast<double>(ctx.Attr<int64_t>("linear_warmup_steps"));
  double lr;
  if (warmup > 0 && t < warmup) {
    const double start = ctx.Attr<float>("start_lr");
    const double end = ctx.Attr<float>("end_lr");
    lr = start + (end - start) * t / warmup;
  } else {
    // Paddle's LinearWarmup steps the schedule it wraps from 0 once warmup ends.
    lr = Decayed(ctx, kind, t - std::max(warmup, 0.0));
  }
  ctx.Output("LearningRate")->mutable_data<float>()[0] = static_cast<float>(lr);
  Tensor* step_out = ctx.Output("StepOut");
  ops_a::DispatchFloat(ctx, step_dtype, "input Step", [&](auto tag) {
    using T = decltype(tag);
    step_out->mutable_data<T>()[0] = static_cast<T>(advance ? t + 1 : t);
  });
}

}  // namespace

void RegisterLrScheduleOps(OpRegistry& r) {
  OpInfo op;
  op.type = "lr_schedule";
  op.doc = "LearningRate = the schedule `kind` at step Step (after linear_warmup_steps of linear warmup); "
           "StepOut = Step + 1 (Step when the optional Apply is 0: gradient merge's accumulating steps)";
  op.inputs = {ops_a::Required("Step"), ops_a::Optional("Apply")};
  op.outputs = {{"LearningRate"}, {"StepOut"}};
  op.attrs = {{"kind", AttrKind::kString, Attribute(std::string("constant"))},
              {"learning_rate", AttrKind::kFloat, Attribute(1.0f)},
              {"T_max", AttrKind::kInt, Attribute(int64_t{1})},
              {"eta_min", AttrKind::kFloat, Attribute(0.0f)},
              {"gamma", AttrKind::kFloat, Attribute(1.0f)},
              {"d_model", AttrKind::kFloat, Attribute(1.0f)},
              {"warmup_steps", AttrKind::kInt, Attribute(int64_t{1})},
              {"boundaries", AttrKind::kInts, Attribute(std::vector<int64_t>{})},
              {"values", AttrKind::kFloats, Attribute(std::vector<float>{})},
              {"linear_warmup_steps", AttrKind::kInt, Attribute(int64_t{0})},
              {"start_lr", AttrKind::kFloat, Attribute(0.0f)},
              {"end_lr", AttrKind::kFloat, Attribute(0.0f)}};
  op.inplace = {{"Step", "StepOut"}};
  op.no_grad_inputs = {"Step", "Apply"};
  // Clustered with the updates, running this kernel there: the rate is one
  // scalar, and its double-precision closed forms (cos, pow) keep JIT-on
  // rates equal to JIT-off ones bit for bit, where generated exp/log would be
  // ~1e-7 off and EwProgram has no cos. The kernel reads Step before it
  // writes StepOut, so the cluster may update the counter in place.
  op.jit = JitLowering::kFramework;
  op.infer_shape = InferLrSchedule;
  op.reference_kernel = LrScheduleKernel;
  r.Add(std::move(op));
}

}  // namespace kiln
