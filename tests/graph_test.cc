// ir::Graph from and back to a block: round trips, undeclared and duplicate
// vars, topological order, in-place writes and var versions. Edits, printing
// and verification: graph_edit_test.
#include "framework/ir/graph.h"

#include <algorithm>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/op_desc.h"
#include "tests/graph_test_util.h"

namespace kiln {
namespace {

using namespace graph_test;  // the helpers shared by the split files (tests/graph_test_util.h)

TEST(GraphTest, MlpRoundTripWithInPlaceSgd) {
  const proto::BlockDesc block = MlpTrainBlock();
  Graph g = Graph::FromBlock(block);
  EXPECT_EQ(g.VerifyMessage(), "");
  ASSERT_EQ(g.OpNodes().size(), 16u);
  // Unchanged graph: block order is the topological order.
  EXPECT_EQ(g.TopologicalOrder(), g.OpNodes());
  ExpectSameBlock(block, g.ToBlock());

  // sgd on w1 reads version 0 and writes version 1 of the same name.
  std::vector<NodeId> ops = g.OpNodes();
  NodeId mm0 = ops[0], mm_grad = ops[12], sgd_w1 = ops[13];
  std::vector<NodeId> w1 = g.VarVersions("w1");
  ASSERT_EQ(w1.size(), 2u);
  EXPECT_EQ(g.InputSlot(mm0, "Y"), std::vector<NodeId>{w1[0]});
  EXPECT_EQ(g.InputSlot(sgd_w1, "Param"), std::vector<NodeId>{w1[0]});
  EXPECT_EQ(g.OutputSlot(sgd_w1, "ParamOut"), std::vector<NodeId>{w1[1]});
  EXPECT_EQ(g.Producer(w1[1]), sgd_w1);
  EXPECT_EQ(g.Producer(w1[0]), kNoNode);
  EXPECT_EQ(g.FindVar("w1"), w1[1]);
  EXPECT_EQ(g.VarVersion(w1[1]), 1);
  EXPECT_EQ(g.VarName(w1[1]), "w1");
  EXPECT_TRUE(g.var(w1[1]).persistable());
  EXPECT_EQ(g.outputs(w1[0]), (std::vector<NodeId>{mm0, mm_grad, sgd_w1}));
  // The update waits for every reader of the old value.
  std::vector<NodeId> deps = g.OpDependencies(sgd_w1);
  EXPECT_NE(std::find(deps.begin(), deps.end(), mm0), deps.end());
  EXPECT_NE(std::find(deps.begin(), deps.end(), mm_grad), deps.end());

  // @EMPTY@ keeps its position but has no node.
  EXPECT_EQ(g.OutputSlot(mm_grad, "X@GRAD"), std::vector<NodeId>{kNoNode});
  EXPECT_EQ(g.outputs(mm_grad), std::vector<NodeId>{g.FindVar("w1@GRAD")});
  EXPECT_EQ(g.inputs(mm_grad), (std::vector<NodeId>{g.FindVar("x"), w1[0], g.FindVar("h1@GRAD")}));
  EXPECT_EQ(g.VarVersions(kEmptyVarName).size(), 0u);

  // A copy is independent.
  Graph copy = g;
  copy.RemoveNode(copy.OpNodes().back());
  EXPECT_EQ(copy.OpNodes().size(), 15u);
  ExpectSameBlock(block, g.ToBlock());
}

TEST(GraphTest, UndeclaredArgsGetFlaggedNodesAndAreNotWritten) {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {4});
  *b.add_ops() = OpBuilder("elementwise_add").In("X", {"x"}).In("Y", {"ghost"}).Out("Out", {"y"}).Build();
  Graph g = Graph::FromBlock(b);
  NodeId ghost = g.FindVar("ghost");
  ASSERT_NE(ghost, kNoNode);
  EXPECT_FALSE(g.IsDeclared(ghost));
  EXPECT_TRUE(g.IsDeclared(g.FindVar("x")));
  EXPECT_FALSE(g.IsDeclared(g.FindVar("y")));
  EXPECT_EQ(g.VarShapeString(ghost), "?");
  EXPECT_EQ(g.VarShapeString(g.FindVar("x")), "f32[4]");
  ExpectSameBlock(b, g.ToBlock());
}

TEST(GraphTest, DuplicateDeclarationIsRejected) {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {4});
  AddVar(&b, "x", {5});
  try {
    Graph::FromBlock(b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("variable 'x' is declared twice"), std::string::npos) << e.what();
  }
}

TEST(GraphTest, DiamondTopologicalOrderFollowsDataThenCreationOrder) {
  Graph g;
  NodeId x = g.AddVarNode(Var("x", {8}));
  NodeId a = g.AddVarNode(Var("a", {8}));
  NodeId b = g.AddVarNode(Var("b", {8}));
  NodeId c = g.AddVarNode(Var("c", {8}));
  NodeId d = g.AddVarNode(Var("d", {8}));
  // Created sink first: the order key alone would put the join first.
  NodeId join = g.AddOpNode(OpBuilder("elementwise_add").Build(), {{"X", {b}}, {"Y", {c}}}, {{"Out", {d}}});
  NodeId right = g.AddOpNode(OpBuilder("tanh").Build(), {{"X", {a}}}, {{"Out", {c}}});
  NodeId left = g.AddOpNode(OpBuilder("exp").Build(), {{"X", {a}}}, {{"Out", {b}}});
  NodeId top = g.AddOpNode(OpBuilder("relu").Build(), {{"X", {x}}}, {{"Out", {a}}});
  EXPECT_EQ(g.VerifyMessage(), "");
  // Ties (tanh, exp) go by creation order.
  EXPECT_EQ(g.TopologicalOrder(), (std::vector<NodeId>{top, right, left, join}));
  EXPECT_EQ(g.OpDependencies(join), (std::vector<NodeId>{right, left}));
  EXPECT_EQ(g.outputs(a), (std::vector<NodeId>{right, left}));
  EXPECT_EQ(g.inputs(join), (std::vector<NodeId>{b, c}));

  proto::BlockDesc out = g.ToBlock();
  ASSERT_EQ(out.ops_size(), 4);
  EXPECT_EQ(out.ops(0).type(), "relu");
  EXPECT_EQ(out.ops(1).type(), "tanh");
  EXPECT_EQ(out.ops(2).type(), "exp");
  EXPECT_EQ(out.ops(3).type(), "elementwise_add");
  EXPECT_EQ(InputArgs(out.ops(3), "X"), std::vector<std::string>{"b"});
  EXPECT_EQ(InputArgs(out.ops(3), "Y"), std::vector<std::string>{"c"});
  // Written back and read again: the same block.
  ExpectSameBlock(out, Graph::FromBlock(out).ToBlock());
}
TEST(GraphTest, InPlaceWriteOrdersAfterReadersOfOldVersion) {
  const proto::BlockDesc block = InPlaceBlock();
  Graph g = Graph::FromBlock(block);
  std::vector<NodeId> ops = g.OpNodes();
  NodeId mm = ops[0], sgd = ops[1], scale = ops[2];
  std::vector<NodeId> w = g.VarVersions("w");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(g.inputs(scale), std::vector<NodeId>{w[1]});
  EXPECT_EQ(g.OpDependencies(sgd), std::vector<NodeId>{mm});
  EXPECT_EQ(g.OpDependencies(scale), std::vector<NodeId>{sgd});

  // A reader of the old value added last (largest order key) still runs
  // before the in-place update.
  NodeId t = g.AddVarNode(Var("t", {3, 3}));
  NodeId relu = g.AddOpNode(OpBuilder("relu").Build(), {{"X", {w[0]}}}, {{"Out", {t}}});
  EXPECT_GT(g.OpOrder(relu), g.OpOrder(scale));
  EXPECT_EQ(g.VerifyMessage(), "");
  EXPECT_EQ(g.TopologicalOrder(), (std::vector<NodeId>{mm, relu, sgd, scale}));
  proto::BlockDesc out = g.ToBlock();
  ASSERT_EQ(out.ops_size(), 4);
  EXPECT_EQ(out.ops(1).type(), "relu");
  EXPECT_EQ(InputArgs(out.ops(1), "X"), std::vector<std::string>{"w"});
  EXPECT_EQ(out.vars(out.vars_size() - 1).name(), "t");  // new vars after the original ones
  ExpectSameBlock(out, Graph::FromBlock(out).ToBlock());

  // Replacing the update (as build_jit_pass would, by a launch op) keeps its
  // place and its ordering after the readers.
  NodeId launch = g.ReplaceOps({sgd}, OpBuilder("jit_launch").Attr("compilation_key", std::string("c0")).Build(),
                               {{"X", {w[0], g.FindVar("g"), g.FindVar("lr")}}}, {{"Out", {w[1]}}});
  EXPECT_TRUE(g.IsRemoved(sgd));
  EXPECT_FALSE(g.IsOp(sgd));
  EXPECT_EQ(g.OpOrder(launch), 1);
  EXPECT_EQ(g.VerifyMessage(), "");
  EXPECT_EQ(g.TopologicalOrder(), (std::vector<NodeId>{mm, relu, launch, scale}));
  EXPECT_EQ(g.OpLabel(launch), "new op 'jit_launch' (node " + std::to_string(launch) + ")");
  EXPECT_EQ(g.OpLabel(mm), "op #0 'matmul'");
}

TEST(GraphTest, VarWrittenBySeveralOpsGetsOneVersionPerWrite) {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "t", {4});
  AddVar(&b, "u", {4});
  *b.add_ops() = OpBuilder("fill_constant").Out("Out", {"t"}).Attr("shape", std::vector<int64_t>{4}).Build();
  *b.add_ops() = OpBuilder("relu").In("X", {"t"}).Out("Out", {"u"}).Build();
  *b.add_ops() = OpBuilder("fill_constant")
                     .Out("Out", {"t"})
                     .Attr("shape", std::vector<int64_t>{4})
                     .Attr("value", 2.0f)
                     .Build();
  *b.add_ops() = OpBuilder("fill_constant")
                     .Out("Out", {"t"})
                     .Attr("shape", std::vector<int64_t>{4})
                     .Attr("value", 3.0f)
                     .Build();
  *b.add_ops() = OpBuilder("exp").In("X", {"t"}).Out("Out", {"u"}).Build();
  Graph g = Graph::FromBlock(b);
  std::vector<NodeId> ops = g.OpNodes();
  std::vector<NodeId> t = g.VarVersions("t");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(g.Producer(t[0]), ops[0]);
  EXPECT_EQ(g.Producer(t[1]), ops[2]);
  EXPECT_EQ(g.Producer(t[2]), ops[3]);
  EXPECT_EQ(g.inputs(ops[1]), std::vector<NodeId>{t[0]});
  EXPECT_EQ(g.inputs(ops[4]), std::vector<NodeId>{t[2]});
  EXPECT_EQ(g.OpDependencies(ops[2]), (std::vector<NodeId>{ops[0], ops[1]}));  // WAW + WAR
  EXPECT_EQ(g.OpDependencies(ops[3]), std::vector<NodeId>{ops[2]});
  // u: written by relu, then by exp with no reader in between.
  EXPECT_EQ(g.VarVersions("u").size(), 2u);
  EXPECT_EQ(g.VerifyMessage(), "");
  EXPECT_EQ(g.TopologicalOrder(), ops);
  ExpectSameBlock(b, g.ToBlock());

  // Removing the middle writer: the last write still follows the first
  // version's writer and reader.
  g.RemoveNode(ops[2]);
  EXPECT_EQ(g.Producer(t[1]), kNoNode);
  EXPECT_EQ(g.OpDependencies(ops[3]), (std::vector<NodeId>{ops[0], ops[1]}));
  EXPECT_EQ(g.VerifyMessage(), "");

  // The whole-graph query gives every op what the per-op query gives, and
  // nothing for var nodes or the removed op.
  const std::vector<std::vector<NodeId>> all = g.AllOpDependencies();
  ASSERT_EQ(all.size(), g.NodeCapacity());
  for (NodeId n = 0; n < g.NodeCapacity(); ++n) {
    if (g.IsOp(n)) {
      EXPECT_EQ(all[n], g.OpDependencies(n)) << "op " << n;
    } else {
      EXPECT_TRUE(all[n].empty()) << "node " << n;
    }
  }
}

}  // namespace
}  // namespace kiln
