// Gradient merge in a program (framework/grad_merge.h through
// OptimizerConfig::grad_merge_steps): the counter op before the updates,
// one accumulation per parameter feeding its update, the flag on every
// update, the state persistable and zero at start; on the executor the
// parameters move only on every k-th step, by the mean gradient;
// AppendLrSchedule reads the flag, and refuses updates of one learning rate
// that merge differently; k = 1 adds nothing; k < 1 is refused.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "framework/backward.h"
#include "framework/executor.h"
#include "framework/lr_schedule.h"
#include "framework/op_desc.h"
#include "framework/operator.h"
#include "framework/optimizer_builder.h"
#include "framework/program_builder.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"
#include "tests/optimizer_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

std::vector<std::string> TypesFrom(const proto::BlockDesc& block, int first) {
  std::vector<std::string> out;
  for (int i = first; i < block.ops_size(); ++i) out.push_back(block.ops(i).type());
  return out;
}

TEST(GradMergeBuilderTest, TheCounterThenEachAccumulationBeforeItsUpdate) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam,
                             OptimizerKind::kAdamW}) {
    SCOPED_TRACE(static_cast<int>(kind));
    ProgramBuilder b(1);
    const auto params = test::BuildLinearLoss(b, {2, true});
    const int before = b.main().blocks(0).ops_size();
    OptimizerConfig c;
    c.kind = kind;
    c.grad_merge_steps = 3;
    const std::string lr = AppendOptimizer(b, params, c);
    ValidateProgram(b.main());
    const proto::BlockDesc& block = b.main().blocks(0);
    const std::string update = block.ops(block.ops_size() - 1).type();
    EXPECT_EQ(TypesFrom(block, before),
              (std::vector<std::string>{"grad_merge_step", "grad_merge", update, "grad_merge", update}));
    const std::string flag = lr + ".grad_merge_apply";
    EXPECT_EQ(OutputArgs(block.ops(before), "Apply"), std::vector<std::string>{flag});
    for (int i = before; i < block.ops_size(); ++i) {
      const proto::OpDesc& op = block.ops(i);
      EXPECT_TRUE(HasOpRole(op, kOpRoleOptimize)) << OpLabel(op, i);
      if (op.type() != update) continue;
      const std::string p = InputArgs(op, "Param")[0];
      // The update reads what the accumulation just before it wrote.
      EXPECT_EQ(InputArgs(op, "Grad"), OutputArgs(block.ops(i - 1), "Out")) << p;
      EXPECT_EQ(InputArgs(block.ops(i - 1), "Acc"), std::vector<std::string>{p + ".grad_merge"});
      EXPECT_EQ(InputArgs(op, "Apply"), std::vector<std::string>{flag}) << p;
      const proto::VarDesc* acc = FindVarDesc(block, p + ".grad_merge");
      ASSERT_NE(acc, nullptr);
      EXPECT_TRUE(acc->persistable());
      EXPECT_EQ(VarDims(*acc), b.VarDimsOf(p));
    }
    const proto::VarDesc* step = FindVarDesc(block, lr + ".grad_merge_step");
    ASSERT_NE(step, nullptr);
    EXPECT_TRUE(step->persistable());
    EXPECT_FALSE(FindVarDesc(block, flag)->persistable());
  }
}

// sgd, k = 2, the same batch every step: w moves on steps 2 and 4 only, by
// lr times the mean of the two (here equal) gradients, as one plain step.
TEST(GradMergeBuilderTest, ParametersMoveOnlyOnEveryKthStep) {
  auto run = [](int64_t k, int steps) {
    ProgramBuilder b(1);
    const auto params = test::BuildLinearLoss(b, {2, true});
    OptimizerConfig c;
    c.grad_merge_steps = k;
    AppendOptimizer(b, params, c);
    Scope scope;
    Executor().RunProgram(b.startup(), scope);
    std::vector<std::vector<float>> w;
    for (int s = 0; s < steps; ++s) {
      FeedTensor(b.main().blocks(0), scope, "x", test::FloatTensor({2, 3}, {1, 2, 3, -4, 5, 0.5f}));
      Executor().RunProgram(b.main(), scope);
      const Tensor& t = scope.GetVar("w")->Get();
      w.emplace_back(t.data<float>(), t.data<float>() + t.numel());
    }
    return w;
  };
  const auto merged = run(2, 4);
  const auto plain = run(1, 2);
  EXPECT_EQ(merged[0], std::vector<float>(12, 0.5f));
  EXPECT_EQ(merged[1], plain[0]);
  EXPECT_EQ(merged[2], merged[1]);
  EXPECT_EQ(merged[3], plain[1]);
  EXPECT_NE(plain[1], plain[0]);
}

TEST(GradMergeBuilderTest, ALrScheduleReadsTheFlag) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b, {2, true});
  OptimizerConfig c;
  c.kind = OptimizerKind::kMomentum;
  c.grad_merge_steps = 4;
  const std::string lr = AppendOptimizer(b, params, c);
  LrSchedule s;
  s.kind = "exponential";
  s.gamma = 0.5f;
  AppendLrSchedule(b, lr, s);
  ValidateProgram(b.main());
  const proto::BlockDesc& block = b.main().blocks(0);
  int step_op = -1, sched = -1, first_update = -1;
  for (int i = 0; i < block.ops_size(); ++i) {
    const std::string& t = block.ops(i).type();
    if (t == "grad_merge_step") step_op = i;
    if (t == "lr_schedule") sched = i;
    if (t == "momentum" && first_update < 0) first_update = i;
  }
  ASSERT_GE(sched, 0);
  EXPECT_LT(step_op, sched);
  EXPECT_LT(sched, first_update);
  EXPECT_EQ(InputArgs(block.ops(sched), "Apply"), std::vector<std::string>{lr + ".grad_merge_apply"});
}

TEST(GradMergeBuilderTest, UpdatesOfOneLearningRateThatMergeDifferentlyAreRefused) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b, {2, true});
  OptimizerConfig c;
  c.grad_merge_steps = 2;
  const std::string lr = AppendOptimizer(b, {params[0]}, c);
  // A plain sgd of the other parameter reading the same learning rate.
  b.RawOp(OpBuilder("sgd")
              .In("Param", {params[1].first})
              .In("Grad", {params[1].second})
              .In("LearningRate", {lr})
              .Out("ParamOut", {params[1].first})
              .Build());
  const int ops = b.main().blocks(0).ops_size();
  const std::string e = ErrorOf([&] { AppendLrSchedule(b, lr, LrSchedule{}); });
  EXPECT_NE(e.find("merge gradients over different steps (some do not merge)"), std::string::npos) << e;
  EXPECT_EQ(b.main().blocks(0).ops_size(), ops);
}

TEST(GradMergeBuilderTest, OneStepAddsNothingAndLessIsRefused) {
  ProgramBuilder plain(1), one(1);
  OptimizerConfig c;
  AppendOptimizer(plain, test::BuildLinearLoss(plain, {2, true}), c);
  c.grad_merge_steps = 1;
  AppendOptimizer(one, test::BuildLinearLoss(one, {2, true}), c);
  EXPECT_EQ(plain.main().SerializeAsString(), one.main().SerializeAsString());
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b, {2, true});
  c.grad_merge_steps = 0;
  const std::string e = ErrorOf([&] { AppendOptimizer(b, params, c); });
  EXPECT_NE(e.find("gradient merge: k_steps must be >= 1, got 0"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
