// AppendOptimizer (framework/optimizer_builder.h): every update op carries
// op_role "optimize" and no other op does; OptimizerConfig::lr_name names the
// learning-rate var the updates read (and which the startup fills); without
// it "learning_rate", or a fresh name when taken; bad configs are refused.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "framework/backward.h"
#include "framework/executor.h"
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

TEST(OptimizerBuilderTest, UpdateOpsAndNoOthersCarryTheOptimizeRole) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam}) {
    SCOPED_TRACE(static_cast<int>(kind));
    ProgramBuilder b(1);
    const auto params = test::BuildLinearLoss(b);
    ASSERT_EQ(params.size(), 2u);
    const int before = b.main().blocks(0).ops_size();
    OptimizerConfig c;
    c.kind = kind;
    AppendOptimizer(b, params, c);
    ValidateProgram(b.main());
    const proto::BlockDesc& block = b.main().blocks(0);
    ASSERT_EQ(block.ops_size(), before + 2);
    for (int i = 0; i < block.ops_size(); ++i) {
      const bool update = i >= before;
      EXPECT_EQ(HasOpRole(block.ops(i), kOpRoleOptimize), update) << OpLabel(block.ops(i), i);
      if (!update) continue;
      EXPECT_EQ(OpRegistry::Global().Get(block.ops(i).type()).jit, JitLowering::kOptimizer);
    }
    // The startup program's initialisers are not updates.
    for (const auto& op : b.startup().blocks(0).ops()) EXPECT_FALSE(HasOpRole(op, kOpRoleOptimize)) << op.type();
  }
}

// One sgd step reads the named learning rate: w' = w - lr * dL/dw.
TEST(OptimizerBuilderTest, LrNameNamesTheLearningRateTheUpdatesRead) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b);
  OptimizerConfig c;
  c.lr = 0.25f;
  c.lr_name = "my_lr";
  EXPECT_EQ(AppendOptimizer(b, params, c), "my_lr");
  EXPECT_EQ(FindVarDesc(b.main().blocks(0), "learning_rate"), nullptr);
  const proto::VarDesc* lr = FindVarDesc(b.main().blocks(0), "my_lr");
  ASSERT_NE(lr, nullptr);
  EXPECT_TRUE(lr->persistable());
  int updates = 0;
  for (const auto& op : b.main().blocks(0).ops()) {
    if (op.type() != "sgd") continue;
    ++updates;
    EXPECT_EQ(InputArgs(op, "LearningRate"), std::vector<std::string>{"my_lr"});
  }
  EXPECT_EQ(updates, 2);

  Scope scope;
  Executor().RunProgram(b.startup(), scope);
  EXPECT_EQ(scope.GetVar("my_lr")->Get().data<float>()[0], 0.25f);
  FeedTensor(b.main().blocks(0), scope, "x", test::FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}));
  Executor().RunProgram(b.main(), scope);
  // dL/dw[k][j] = sum_i x[i][k] / 8 (mean over 2 x 4 outputs); w starts at 0.5.
  const float* w = scope.GetVar("w")->Get().data<float>();
  const float col_sums[3] = {5, 7, 9};
  for (int k = 0; k < 3; ++k) {
    for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(w[k * 4 + j], 0.5f - 0.25f * col_sums[k] / 8) << k << "," << j;
  }
}

// Without lr_name: "learning_rate"; a second optimizer in the same program
// gets a fresh name instead of sharing (or re-initialising) the first one's.
TEST(OptimizerBuilderTest, TheDefaultLearningRateNameIsNeverShared) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b);
  OptimizerConfig c;
  c.lr = 0.5f;
  EXPECT_EQ(AppendOptimizer(b, {params[0]}, c), "learning_rate");
  c.lr = 0.125f;
  const std::string second = AppendOptimizer(b, {params[1]}, c);
  EXPECT_NE(second, "learning_rate");
  EXPECT_EQ(second.rfind("learning_rate_", 0), 0u) << second;
  Scope scope;
  Executor().RunProgram(b.startup(), scope);
  EXPECT_EQ(scope.GetVar("learning_rate")->Get().data<float>()[0], 0.5f);
  EXPECT_EQ(scope.GetVar(second)->Get().data<float>()[0], 0.125f);
}

TEST(OptimizerBuilderTest, ATakenLrNameOrABadConfigIsAnError) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b);
  OptimizerConfig c;
  c.lr_name = "w";  // a parameter
  std::string e = ErrorOf([&] { AppendOptimizer(b, params, c); });
  EXPECT_NE(e.find("variable 'w' declared twice"), std::string::npos) << e;
  c.lr_name = "";
  c.lr = 0;
  e = ErrorOf([&] { AppendOptimizer(b, params, c); });
  EXPECT_NE(e.find("learning rate must be finite and > 0, got 0"), std::string::npos) << e;
  for (const auto& op : b.main().blocks(0).ops()) EXPECT_FALSE(HasOpRole(op, kOpRoleOptimize)) << op.type();
}

}  // namespace
}  // namespace kiln
