// lr_schedule (framework/ops/lr_schedule_op.cc) against the closed forms of
// Paddle's paddle.optimizer.lr schedules, at step 0, at warmup and piecewise
// boundaries and past T_max; StepOut advances the counter; AppendLrSchedule
// (framework/lr_schedule.h) places the op first, before the updates, with
// op_role lr_sched, and a test clone drops it; bad schedules are refused;
// ParseLrSchedule reads kiln train --lr_schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/backward.h"
#include "framework/checkpoint/inference.h"
#include "framework/lr_schedule.h"
#include "framework/op_desc.h"
#include "framework/operator.h"
#include "framework/optimizer_builder.h"
#include "framework/program_builder.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;
using test::FloatTensor;
using test::RunOp;

// The lr_schedule op of `s` (as AppendLrSchedule writes it) run at `step`:
// {learning rate, step out}.
std::pair<float, float> At(const LrSchedule& s, float step) {
  ProgramBuilder b(1);
  b.Persistable("lr", {1}, 1.f);
  AppendLrSchedule(b, "lr", s);
  const proto::OpDesc& op = b.main().blocks(0).ops(0);
  auto scope = RunOp(op, {{"lr.step", FloatTensor({1}, {step})}});
  return {scope->GetVar("lr")->Get().data<float>()[0], scope->GetVar("lr.step")->Get().data<float>()[0]};
}

float Lr(const LrSchedule& s, float step) { return At(s, step).first; }

TEST(LrScheduleTest, CosineMatchesTheClosedFormAndContinuesPastTMax) {
  LrSchedule s;
  s.kind = "cosine";
  s.learning_rate = 0.5f;
  s.T_max = 10;
  s.eta_min = 0.01f;
  for (int t : {0, 1, 5, 9, 10, 11, 20, 25}) {
    const double want = 0.01 + (0.5 - 0.01) * (1 + std::cos(M_PI * t / 10)) / 2;
    EXPECT_NEAR(Lr(s, t), want, 1e-7) << t;
  }
  EXPECT_FLOAT_EQ(Lr(s, 0), 0.5f);
  EXPECT_NEAR(Lr(s, 10), 0.01f, 1e-8);
}

TEST(LrScheduleTest, ExponentialAndNoam) {
  LrSchedule e;
  e.kind = "exponential";
  e.learning_rate = 0.1f;
  e.gamma = 0.9f;
  for (int t : {0, 1, 2, 17}) EXPECT_NEAR(Lr(e, t), 0.1 * std::pow(0.9, t), 1e-8) << t;

  LrSchedule n;
  n.kind = "noam";
  n.learning_rate = 2.f;
  n.d_model = 64;
  n.warmup_steps = 4;
  // Paddle: 0 at step 0 (min(1, 0)); linear up to warmup_steps, then t^-0.5.
  EXPECT_EQ(Lr(n, 0), 0.f);
  for (int t : {1, 3, 4, 5, 100}) {
    const double want = 2.0 / 8.0 * std::min(std::pow(t, -0.5), t * std::pow(4.0, -1.5));
    EXPECT_NEAR(Lr(n, t), want, 1e-8) << t;
  }
}

TEST(LrScheduleTest, PiecewiseSwitchesAtEachBoundary) {
  LrSchedule p;
  p.kind = "piecewise";
  p.boundaries = {3, 6};
  p.values = {1.f, 0.5f, 0.1f};
  const std::vector<std::pair<int, float>> want = {{0, 1.f}, {2, 1.f}, {3, 0.5f}, {5, 0.5f}, {6, 0.1f}, {50, 0.1f}};
  for (const auto& [t, v] : want) EXPECT_EQ(Lr(p, t), v) << t;
}

TEST(LrScheduleTest, LinearWarmupThenTheWrappedScheduleFromItsStepZero) {
  LrSchedule s;
  s.kind = "cosine";
  s.learning_rate = 0.4f;
  s.T_max = 8;
  s.linear_warmup_steps = 4;
  s.start_lr = 0.f;
  s.end_lr = 0.4f;
  for (int t : {0, 1, 3}) EXPECT_NEAR(Lr(s, t), 0.4 * t / 4, 1e-7) << t;
  for (int t : {4, 5, 12}) EXPECT_NEAR(Lr(s, t), 0.2 * (1 + std::cos(M_PI * (t - 4) / 8)), 1e-7) << t;

  LrSchedule c;  // LinearWarmup over a number
  c.learning_rate = 0.3f;
  c.linear_warmup_steps = 2;
  c.start_lr = 0.1f;
  c.end_lr = 0.3f;
  EXPECT_FLOAT_EQ(Lr(c, 0), 0.1f);
  EXPECT_FLOAT_EQ(Lr(c, 1), 0.2f);
  EXPECT_FLOAT_EQ(Lr(c, 2), 0.3f);
  EXPECT_FLOAT_EQ(Lr(c, 9), 0.3f);
}

TEST(LrScheduleTest, StepOutAdvancesTheCounter) {
  LrSchedule s;
  EXPECT_EQ(At(s, 0).second, 1.f);
  EXPECT_EQ(At(s, 41).second, 42.f);
}

// loss = mean(x @ w); sgd with a schedule.
TEST(LrScheduleTest, AppendPutsTheOpFirstAndATestCloneDropsIt) {
  ProgramBuilder b(1);
  const std::string x = b.Data("x", {2, 3});
  const std::string w = b.Param("w", {3, 1}, Init::Constant(0.5f));
  const std::string loss = b.Op1("mean", {{"X", {b.Op1("matmul", {{"X", {x}}, {"Y", {w}}})}}});
  const auto params = AppendBackward(&b.main(), loss);
  const std::string lr = AppendOptimizer(b, params, OptimizerConfig{});
  const int ops = b.main().blocks(0).ops_size();
  LrSchedule s;
  s.kind = "exponential";
  s.gamma = 0.5f;
  EXPECT_EQ(AppendLrSchedule(b, lr, s), lr + ".step");
  ValidateProgram(b.main());
  const proto::BlockDesc& block = b.main().blocks(0);
  ASSERT_EQ(block.ops_size(), ops + 1);
  ASSERT_EQ(block.ops(0).type(), "lr_schedule");
  EXPECT_TRUE(HasOpRole(block.ops(0), kOpRoleLRSched));
  EXPECT_EQ(block.ops(1).type(), "matmul");
  EXPECT_EQ(block.ops(ops).type(), "sgd");
  const proto::VarDesc* step = FindVarDesc(block, lr + ".step");
  ASSERT_NE(step, nullptr);
  EXPECT_TRUE(step->persistable());
  const proto::ProgramDesc test = ForTestProgram(b.main());
  for (const auto& op : test.blocks(0).ops()) EXPECT_NE(op.type(), "lr_schedule");
  EXPECT_EQ(FindVarDesc(test.blocks(0), lr + ".step"), nullptr);
}

TEST(LrScheduleTest, BadSchedulesAreRefused) {
  auto error = [](LrSchedule s) {
    return ErrorOf([&] {
      ProgramBuilder b(1);
      b.Persistable("lr", {1}, 1.f);
      AppendLrSchedule(b, "lr", s);
    });
  };
  LrSchedule s;
  s.kind = "cosin";
  EXPECT_NE(error(s).find("unknown learning-rate schedule 'cosin'"), std::string::npos) << error(s);
  s.kind = "cosine";
  s.T_max = 0;
  EXPECT_NE(error(s).find("T_max must be > 0, got 0"), std::string::npos) << error(s);
  s = LrSchedule{};
  s.kind = "piecewise";
  s.boundaries = {2, 1};
  s.values = {1, 2, 3};
  EXPECT_NE(error(s).find("boundaries must increase, got 2 then 1"), std::string::npos) << error(s);
  s.values = {1, 2};
  EXPECT_NE(error(s).find("expected one more value than boundaries"), std::string::npos) << error(s);
  EXPECT_NE(ErrorOf([] {
              ProgramBuilder b(1);
              AppendLrSchedule(b, "nope", LrSchedule{});
            }).find("declares no variable 'nope'"),
            std::string::npos);
}

// kiln train --lr_schedule's form.
TEST(LrScheduleTest, ParseReadsEachKindOverTheBaseRate) {
  LrSchedule s = ParseLrSchedule("cosine:T_max=60,eta_min=0.001,warmup=10,start_lr=0.01", 0.1f);
  EXPECT_EQ(s.kind, "cosine");
  EXPECT_EQ(s.learning_rate, 0.1f);
  EXPECT_EQ(s.T_max, 60);
  EXPECT_EQ(s.eta_min, 0.001f);
  EXPECT_EQ(s.linear_warmup_steps, 10);
  EXPECT_EQ(s.start_lr, 0.01f);
  EXPECT_EQ(s.end_lr, 0.1f);
  s = ParseLrSchedule("piecewise:boundaries=100/200,values=0.1/0.01/0.001", 0.5f);
  EXPECT_EQ(s.boundaries, (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(s.values, (std::vector<float>{0.1f, 0.01f, 0.001f}));
  s = ParseLrSchedule("warmup:warmup=5", 0.2f);
  EXPECT_EQ(s.kind, "constant");
  EXPECT_FLOAT_EQ(Lr(s, 0), 0.f);
  EXPECT_FLOAT_EQ(Lr(s, 5), 0.2f);
  EXPECT_EQ(ParseLrSchedule("noam:d_model=512,warmup_steps=4000", 1.f).warmup_steps, 4000);
  EXPECT_EQ(ParseLrSchedule("exponential:gamma=0.5", 1.f).gamma, 0.5f);

  auto error = [](const std::string& spec) { return ErrorOf([&] { ParseLrSchedule(spec, 0.1f); }); };
  EXPECT_NE(error("cosin:T_max=3").find("--lr_schedule=cosin:T_max=3: unknown schedule 'cosin'"), std::string::npos);
  EXPECT_NE(error("cosine").find("cosine needs T_max=N"), std::string::npos) << error("cosine");
  EXPECT_NE(error("cosine:T_max=x").find("T_max needs an integer, got 'x'"), std::string::npos);
  EXPECT_NE(error("exponential:gamma").find("expected KEY=VALUE, got 'gamma'"), std::string::npos);
  EXPECT_NE(error("exponential:gama=0.5").find("unknown key 'gama'"), std::string::npos);
  EXPECT_NE(error("warmup").find("warmup needs warmup=N"), std::string::npos);
  EXPECT_NE(error("piecewise:boundaries=3,values=1").find("expected one more value than boundaries"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
