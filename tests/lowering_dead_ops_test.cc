// Lowering step dead_ops (compiler/lowering/dead_ops.h).
#include <gtest/gtest.h>

#include "compiler/lowering/cluster.h"
#include "compiler/lowering/dead_ops.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

proto::OpDesc Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out}).Build();
}

// The ops DeadOps finds in the case's cluster.
std::vector<int> DeadOpsOf(const LoweringCase& c) {
  const JitSubgraph sg = MakeSubgraph(c);
  const jit::Cluster cluster(sg, SignatureOf(c), c.options, OpRegistry::Global());
  return jit::DeadOps(cluster);
}

// r = relu(x) and e = exp(x) leave the cluster; s = scale(r) and t = tanh(s)
// feed nothing that does: both are dropped, and r is stored by the kernel
// that computes it, not kept for them.
TEST(DeadOpsTest, OpsWhoseResultsNothingUsesAreDropped) {
  LoweringCase c;
  c.name = "dead_ops";
  c.ops = {Unary("relu", "x", "r"), OpBuilder("scale").In("X", {"r"}).Out("Out", {"s"}).Attr("scale", 2.0f).Build(),
           Unary("tanh", "s", "t"), Unary("exp", "x", "e")};
  c.inputs = {{"x", {3, 17}}};
  c.outputs = {"r", "e"};
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_TRUE(StepMatched(*obj, "dead_ops")) << obj->lowering;
  EXPECT_EQ(DeadOpsOf(c), (std::vector<int>{1, 2}));
  for (const auto& b : obj->program.plan.buffers) {
    EXPECT_NE(b.name, "s") << obj->Listing();
    EXPECT_NE(b.name, "t") << obj->Listing();
  }
}

// a is written twice: its first value is read by relu, whose b leaves the
// cluster, and its second value leaves too. Every op is live.
TEST(DeadOpsTest, DoesNotFireWhenAnOverwrittenValueIsReadFirst) {
  LoweringCase c;
  c.name = "dead_ops_not_fired";
  c.ops = {OpBuilder("scale").In("X", {"x"}).Out("Out", {"a"}).Attr("scale", 3.0f).Build(), Unary("relu", "a", "b"),
           Unary("exp", "b", "a")};
  c.inputs = {{"x", {5, 3}}};
  c.outputs = {"b", "a"};
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_FALSE(StepMatched(*obj, "dead_ops")) << obj->lowering;
  // With only the second a wanted, relu still reads the first: nothing drops.
  c.outputs = {"a"};
  EXPECT_EQ(DeadOpsOf(c), std::vector<int>{});
  // With only b wanted, the overwrite is dead.
  c.outputs = {"b"};
  EXPECT_EQ(DeadOpsOf(c), std::vector<int>{2});
}

// An op whose result a live op reads for its dims alone stays.
TEST(DeadOpsTest, AValueReadForItsShapeKeepsItsProducer) {
  LoweringCase c;
  c.name = "dead_ops_shape_reader";
  c.ops = {Unary("relu", "z", "y"), OpBuilder("reduce_mean_grad")
                                        .In("X", {"y"})
                                        .In("Out@GRAD", {"dm"})
                                        .Out("X@GRAD", {"dy"})
                                        .Attr("reduce_all", true)
                                        .Build()};
  c.inputs = {{"z", {4, 9}}, {"dm", {1}}};
  c.outputs = {"dy"};
  EXPECT_EQ(DeadOpsOf(c), std::vector<int>{});
  CheckLoweringNumerics(c);
}

}  // namespace
}  // namespace kiln::test
