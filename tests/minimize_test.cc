// framework/minimize.h: minimize and append_backward as the front end calls
// them, with the checks that keep a script from a silently wrong step.
#include "framework/minimize.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/op_desc.h"
#include "framework/operator.h"
#include "framework/program_builder.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

struct Net {
  proto::ProgramDesc main = EmptyProgram(), startup = EmptyProgram();
  std::string loss, per_row, w1, w2;
};

// x [-1,4] -> fc w1 [4,3] -> fc w2 [3,1]; per_row = (y - 1)^2, loss = mean.
Net TwoLayers() {
  Net n;
  ProgramBuilder b(&n.main, &n.startup, 1);
  const std::string x = b.Data("x", {-1, 4});
  n.w1 = b.Param("w1", {4, 3}, Init::XavierUniform(4, 3));
  n.w2 = b.Param("w2", {3, 1}, Init::XavierUniform(3, 1));
  const std::string h = b.Op1("matmul", {{"X", {x}}, {"Y", {n.w1}}});
  const std::string y = b.Op1("matmul", {{"X", {h}}, {"Y", {n.w2}}});
  const std::string d = b.Op1("scale", {{"X", {y}}}, {{"bias", -1.0f}});
  n.per_row = b.Op1("elementwise_mul", {{"X", {d}}, {"Y", {d}}});
  n.loss = b.Op1("mean", {{"X", {n.per_row}}});
  return n;
}

int CountRole(const proto::ProgramDesc& p, const char* role) {
  int n = 0;
  for (const auto& op : p.blocks(0).ops()) n += HasOpRole(op, role);
  return n;
}

TEST(MinimizeTest, ALossOfMoreThanOneElementIsRefusedNamingItsShape) {
  Net n = TwoLayers();
  const proto::ProgramDesc before = n.main;
  EXPECT_EQ(ErrorOf([&] { Minimize(&n.main, &n.startup, 1, n.per_row, OptimizerConfig{}, std::nullopt); }),
            "minimize: the loss '" + n.per_row +
                "' has shape [-1,1]; a loss must be one element (reduce it first, e.g. with kiln.nn.mean)");
  EXPECT_EQ(n.main.SerializeAsString(), before.SerializeAsString());
  EXPECT_NE(ErrorOf([&] { AppendBackwardFor(&n.main, n.per_row, std::nullopt); }).find("append_backward: the loss"),
            std::string::npos);
}

TEST(MinimizeTest, MinimizingTheSameParametersTwiceIsRefusedAndAnotherParameterListIsNot) {
  Net n = TwoLayers();
  const Minimized first = Minimize(&n.main, &n.startup, 1, n.loss, OptimizerConfig{}, std::nullopt);
  EXPECT_EQ(first.params_grads.size(), 2u);
  EXPECT_EQ(CountRole(n.main, kOpRoleOptimize), 2);
  const proto::ProgramDesc main = n.main, startup = n.startup;
  const std::string e = ErrorOf([&] { Minimize(&n.main, &n.startup, 1, n.loss, OptimizerConfig{}, std::nullopt); });
  EXPECT_EQ(e.rfind("minimize: the program already updates 'w1', 'w2' (minimize was applied to it before)", 0), 0u)
      << e;
  EXPECT_EQ(n.main.SerializeAsString(), main.SerializeAsString());
  EXPECT_EQ(n.startup.SerializeAsString(), startup.SerializeAsString());

  Net m = TwoLayers();
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  Minimize(&m.main, &m.startup, 1, m.loss, OptimizerConfig{}, std::vector<std::string>{m.w1});
  const Minimized second = Minimize(&m.main, &m.startup, 1, m.loss, adam, std::vector<std::string>{m.w2});
  ASSERT_EQ(second.params_grads.size(), 1u);
  EXPECT_EQ(second.params_grads[0].first, m.w2);
  EXPECT_EQ(CountRole(m.main, kOpRoleOptimize), 2);
  EXPECT_NE(ErrorOf([&] { Minimize(&m.main, &m.startup, 1, m.loss, adam, std::vector<std::string>{m.w1}); }),
            "(no error)");
}

TEST(MinimizeTest, AParameterListNamesOnlyParametersTheLossTrains) {
  Net n = TwoLayers();
  EXPECT_EQ(ErrorOf([&] { AppendBackwardFor(&n.main, n.loss, std::vector<std::string>{"x"}); }),
            "parameter_list: 'x' gets no gradient from the loss '" + n.loss +
                "' (not a trainable parameter it depends on: stop_gradient, or not on its path)");
  const ParamGrads pg = AppendBackwardFor(&n.main, n.loss, std::vector<std::string>{n.w2});
  ASSERT_EQ(pg.size(), 1u);
  EXPECT_EQ(pg[0], std::make_pair(n.w2, n.w2 + "@GRAD"));
}

}  // namespace
}  // namespace kiln
