// ir::Graph edits (replacing groups of ops, moving edges), its Graphviz and
// text output, and Verify's findings.
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

proto::BlockDesc ForwardBlock() {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {64, 784});
  AddVar(&b, "w1", {784, 512}, proto::FP32, true);
  AddVar(&b, "b1", {512}, proto::FP32, true);
  AddVar(&b, "label", {64, 1}, proto::INT64);
  AddVar(&b, "h", {64, 512});
  AddVar(&b, "a", {64, 512});
  AddVar(&b, "r", {64, 512});
  AddVar(&b, "sm", {64, 512});
  AddVar(&b, "loss", {64, 1});
  *b.add_ops() =
      OpBuilder("matmul").In("X", {"x"}).In("Y", {"w1"}).Out("Out", {"h"}).Attr("transpose_Y", false).Build();
  *b.add_ops() = OpBuilder("elementwise_add")
                     .In("X", {"h"})
                     .In("Y", {"b1"})
                     .Out("Out", {"a"})
                     .Attr("axis", int64_t{-1})
                     .Build();
  *b.add_ops() = OpBuilder("relu").In("X", {"a"}).Out("Out", {"r"}).Build();
  *b.add_ops() = OpBuilder("softmax_with_cross_entropy")
                     .In("Logits", {"r"})
                     .In("Label", {"label"})
                     .Out("Softmax", {"sm"})
                     .Out("Loss", {"loss"})
                     .Build();
  return b;
}

TEST(GraphTest, ReplaceGroupOfOpsByOneOpKeepsGraphValid) {
  Graph g = Graph::FromBlock(ForwardBlock());
  std::vector<NodeId> ops = g.OpNodes();
  NodeId x = g.FindVar("x"), a = g.FindVar("a");
  NodeId fused = g.ReplaceOps({ops[1], ops[2]}, OpBuilder("fused_bias_relu").Build(),
                              {{"X", {g.FindVar("h")}}, {"Bias", {g.FindVar("b1")}}}, {{"Out", {g.FindVar("r")}}});
  EXPECT_EQ(g.VerifyMessage(), "");
  // The intermediate is gone; other ids still name the same nodes.
  EXPECT_TRUE(g.IsRemoved(a));
  EXPECT_EQ(g.FindVar("a"), kNoNode);
  EXPECT_EQ(g.VarName(x), "x");
  EXPECT_EQ(g.OpNodes().size(), 3u);
  EXPECT_EQ(g.TopologicalOrder(), (std::vector<NodeId>{ops[0], fused, ops[3]}));
  EXPECT_EQ(Types(g, g.TopologicalOrder()),
            (std::vector<std::string>{"matmul", "fused_bias_relu", "softmax_with_cross_entropy"}));
  EXPECT_EQ(g.Producer(g.FindVar("r")), fused);

  proto::BlockDesc out = g.ToBlock();
  ASSERT_EQ(out.ops_size(), 3);
  EXPECT_EQ(InputArgs(out.ops(1), "X"), std::vector<std::string>{"h"});
  EXPECT_EQ(InputArgs(out.ops(1), "Bias"), std::vector<std::string>{"b1"});
  EXPECT_EQ(OutputArgs(out.ops(1), "Out"), std::vector<std::string>{"r"});
  EXPECT_EQ(FindVarDesc(out, "a"), nullptr);
  EXPECT_NE(FindVarDesc(out, "h"), nullptr);
  ExpectSameBlock(out, Graph::FromBlock(out).ToBlock());

  // Removing a var an op still reads turns that arg into @EMPTY@.
  g.RemoveNode(g.FindVar("label"));
  EXPECT_EQ(g.VerifyMessage(), "");
  EXPECT_EQ(InputArgs(g.op(ops[3]), "Label"), std::vector<std::string>{kEmptyVarName});
  EXPECT_EQ(g.InputSlot(ops[3], "Label"), std::vector<NodeId>{kNoNode});
}

TEST(GraphTest, ReplacementTakesThePlaceOfItsGroup) {
  proto::BlockDesc b = NewBlock();
  for (const char* n : {"x", "a", "b", "c"}) AddVar(&b, n, {4});
  *b.add_ops() = OpBuilder("relu").In("X", {"x"}).Out("Out", {"a"}).Build();
  *b.add_ops() = OpBuilder("exp").In("X", {"x"}).Out("Out", {"b"}).Build();
  *b.add_ops() = OpBuilder("tanh").In("X", {"x"}).Out("Out", {"c"}).Build();
  Graph g = Graph::FromBlock(b);
  std::vector<NodeId> ops = g.OpNodes();
  // Independent ops: only the order key places the new op (its id is the largest).
  NodeId fused = g.ReplaceOps({ops[0]}, OpBuilder("fused").Build(), {{"X", {g.FindVar("x")}}},
                              {{"Out", {g.FindVar("a")}}});
  EXPECT_EQ(g.TopologicalOrder(), (std::vector<NodeId>{fused, ops[1], ops[2]}));
  NodeId appended = g.AddOpNode(OpBuilder("sigmoid").Build(), {{"X", {g.FindVar("x")}}}, {});
  EXPECT_EQ(g.OpOrder(appended), 3);
  EXPECT_EQ(g.TopologicalOrder(), (std::vector<NodeId>{fused, ops[1], ops[2], appended}));
  EXPECT_EQ(g.VerifyMessage(), "");
}

TEST(GraphTest, EdgeEditsKeepArgsInSync) {
  Graph g = Graph::FromBlock(ForwardBlock());
  std::vector<NodeId> ops = g.OpNodes();
  NodeId h = g.FindVar("h"), x = g.FindVar("x");
  // relu reads h directly; a loses its reader.
  g.ReplaceInput(ops[2], g.FindVar("a"), h);
  EXPECT_EQ(InputArgs(g.op(ops[2]), "X"), std::vector<std::string>{"h"});
  EXPECT_EQ(g.outputs(h), (std::vector<NodeId>{ops[1], ops[2]}));
  // Read x twice through a new slot.
  g.SetInputs(ops[2], "Extra", {x, kNoNode, x});
  EXPECT_EQ(InputArgs(g.op(ops[2]), "Extra"), (std::vector<std::string>{"x", kEmptyVarName, "x"}));
  EXPECT_EQ(g.inputs(ops[2]), (std::vector<NodeId>{h, x, x}));
  g.SetInputs(ops[2], "Extra", {});
  EXPECT_EQ(g.inputs(ops[2]), std::vector<NodeId>{h});
  EXPECT_EQ(g.VerifyMessage(), "");

  // In-place rename (what inplace_pass does): relu's output becomes a new
  // version of its input's name; the reader downstream follows.
  NodeId r = g.FindVar("r");
  g.RenameVar(r, "h", h);
  EXPECT_EQ(g.VarName(r), "h");
  EXPECT_EQ(g.VarVersions("h"), (std::vector<NodeId>{h, r}));
  EXPECT_EQ(OutputArgs(g.op(ops[2]), "Out"), std::vector<std::string>{"h"});
  EXPECT_EQ(InputArgs(g.op(ops[3]), "Logits"), std::vector<std::string>{"h"});
  EXPECT_EQ(g.VerifyMessage(), "");
  // matmul writes h v0, add and relu read it, relu writes h v1.
  EXPECT_EQ(g.OpDependencies(ops[2]), (std::vector<NodeId>{ops[0], ops[1]}));
  proto::BlockDesc out = g.ToBlock();
  EXPECT_EQ(FindVarDesc(out, "r"), nullptr);  // no node left under that name
  Graph again = Graph::FromBlock(out);
  EXPECT_EQ(again.VarVersions("h").size(), 2u);
  ExpectSameBlock(out, again.ToBlock());

  // AppendOp connects by name: reads the latest version, writes a new one.
  NodeId scale = g.AppendOp(OpBuilder("scale").In("X", {"h"}).Out("Out", {"h"}).Build());
  EXPECT_EQ(g.inputs(scale), std::vector<NodeId>{r});
  EXPECT_EQ(g.VarVersions("h").size(), 3u);
  EXPECT_EQ(g.TopologicalOrder().back(), scale);
  EXPECT_EQ(g.VerifyMessage(), "");
}

TEST(GraphTest, DotOutput) {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {64, 784});
  AddVar(&b, "w", {784, 10}, proto::FP32, true);
  AddVar(&b, "y", {64, 10});
  *b.add_ops() = OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"y"}).Build();
  *b.add_ops() = OpBuilder("sum").In("X", {"y", "ghost"}).Out("Out", {"y"}).Build();
  Graph g = Graph::FromBlock(b);
  std::string dot = g.ToDot();
  EXPECT_EQ(dot.rfind("digraph \"kiln\" {\n", 0), 0u) << dot;
  for (const char* want : {
           "  n0 [shape=ellipse, label=\"x\\nf32[64,784]\"];\n",
           "  n1 [shape=ellipse, label=\"w\\nf32[784,10]\", style=filled, fillcolor=lightgrey];\n",
           "  n3 [shape=box, label=\"matmul\"];\n",
           "  n0 -> n3 [label=\"X\"];\n",
           "  n1 -> n3 [label=\"Y\"];\n",
           "  n3 -> n2 [label=\"Out\"];\n",
           "  n2 -> n4 [label=\"X[0]\"];\n",
           "  n5 [shape=ellipse, label=\"ghost\\n?\", style=dashed];\n",
           "  n5 -> n4 [label=\"X[1]\"];\n",
           "  n6 [shape=ellipse, label=\"y (v1)\\nf32[64,10]\"];\n",
           "  n4 -> n6 [label=\"Out\"];\n",
       }) {
    EXPECT_NE(dot.find(want), std::string::npos) << "missing " << want << " in\n" << dot;
  }
  EXPECT_EQ(dot.substr(dot.size() - 2), "}\n");
  // Deterministic: equal for a copy and for a rebuilt graph.
  EXPECT_EQ(Graph(g).ToDot(), dot);
  EXPECT_EQ(Graph::FromBlock(b).ToDot(), dot);
}

TEST(GraphTest, PrintSmallProgram) {
  Graph g = Graph::FromBlock(ForwardBlock());
  const std::string want =
      "%0 = var \"x\" : f32[64,784]\n"
      "%1 = param \"w1\" : f32[784,512]\n"
      "%2 = param \"b1\" : f32[512]\n"
      "%3 = var \"label\" : i64[64,1]\n"
      "%5 = matmul[transpose_Y=false](%0, %1) : f32[64,512]  # h\n"
      "%7 = elementwise_add[axis=-1](%5, %2) : f32[64,512]  # a\n"
      "%9 = relu(%7) : f32[64,512]  # r\n"
      "%10 = softmax_with_cross_entropy(%9, %3) -> (%11 : f32[64,512], %12 : f32[64,1])  # sm, loss\n";
  EXPECT_EQ(g.Print(), want);

  // In place: the update is a new value of w1; @EMPTY@ prints as _.
  NodeId lr = g.AddVarNode(Var("lr", {1}, proto::FP32, true));
  g.AppendOp(OpBuilder("sgd")
                 .In("Param", {"w1"})
                 .In("Grad", {kEmptyVarName})
                 .In("LearningRate", {"lr"})
                 .Out("ParamOut", {"w1"})
                 .Build());
  EXPECT_NE(lr, kNoNode);
  const std::string printed = g.Print();
  EXPECT_NE(printed.find("%4 = param \"lr\" : f32[1]\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("%15 = sgd(%1, _, %4) : f32[784,512]  # w1\n"), std::string::npos) << printed;
}

TEST(GraphTest, VerifyFindsCycles) {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {4});
  AddVar(&b, "a", {4});
  AddVar(&b, "b", {4});
  *b.add_ops() = OpBuilder("relu").In("X", {"x"}).Out("Out", {"a"}).Build();
  *b.add_ops() = OpBuilder("exp").In("X", {"a"}).Out("Out", {"b"}).Build();
  Graph g = Graph::FromBlock(b);
  EXPECT_EQ(g.VerifyMessage(), "");
  std::vector<NodeId> ops = g.OpNodes();

  Graph cyclic = g;
  cyclic.SetInputs(ops[0], "X", {cyclic.FindVar("b")});  // relu(b) -> a -> exp -> b
  EXPECT_EQ(cyclic.VerifyMessage(), "cycle through op #0 'relu', op #1 'exp'");
  EXPECT_THROW(cyclic.TopologicalOrder(), Error);
  EXPECT_THROW(cyclic.ToBlock(), Error);
  EXPECT_THROW(cyclic.Verify(), Error);
  EXPECT_EQ(cyclic.Print().rfind("# cycle through op #0 'relu', op #1 'exp'\n", 0), 0u);

  Graph self_loop = g;
  self_loop.SetOutputs(ops[1], "Out", {self_loop.FindVar("a")});  // exp reads and writes a
  std::string msg = self_loop.VerifyMessage();
  EXPECT_NE(msg.find("cycle through op #1 'exp'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("var 'a' version 0 has 2 producers: op #0 'relu' op #1 'exp'"), std::string::npos) << msg;

  // An op reading both the old and the new value of an in-place var cannot be
  // ordered: the ordering constraint closes the cycle.
  Graph inplace = Graph::FromBlock(InPlaceBlock());
  std::vector<NodeId> w = inplace.VarVersions("w");
  NodeId both = inplace.AddOpNode(OpBuilder("elementwise_add").Build(), {{"X", {w[0]}}, {"Y", {w[1]}}},
                                  {{"Out", {inplace.AddVarNode(Var("s", {3, 3}))}}});
  msg = inplace.VerifyMessage();
  EXPECT_NE(msg.find("cycle through op #1 'sgd', new op 'elementwise_add' (node " + std::to_string(both) + ")"),
            std::string::npos)
      << msg;
  try {
    inplace.Verify();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
}

TEST(GraphTest, VerifyFindsArgsOutOfSyncWithEdges) {
  Graph g = Graph::FromBlock(ForwardBlock());
  NodeId relu = g.OpNodes()[2];
  g.mutable_op(relu)->mutable_inputs(0)->set_args(0, "zzz");
  EXPECT_EQ(g.VerifyMessage(), "op #2 'relu' input X[0] is 'zzz' but its edge goes to var 'a'");
  g.mutable_op(relu)->mutable_inputs(0)->add_args("x");
  std::string msg = g.VerifyMessage();
  EXPECT_NE(msg.find("op #2 'relu' input X[1] 'x' has 0 edges, expected 1"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln
