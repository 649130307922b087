#include "framework/ir/graph.h"

#include <algorithm>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/op_desc.h"

namespace kiln {
namespace {

using ir::Graph;
using ir::kNoNode;
using ir::NodeId;

proto::VarDesc Var(const std::string& name, Dims dims, proto::DataType dtype = proto::FP32,
                   bool persistable = false) {
  proto::VarDesc v;
  v.set_name(name);
  v.set_dtype(dtype);
  for (int64_t d : dims) v.add_dims(d);
  v.set_persistable(persistable);
  return v;
}

void AddVar(proto::BlockDesc* b, const std::string& name, Dims dims, proto::DataType dtype = proto::FP32,
            bool persistable = false) {
  *b->add_vars() = Var(name, dims, dtype, persistable);
}

proto::BlockDesc NewBlock() {
  proto::BlockDesc b;
  b.set_idx(0);
  b.set_parent_idx(-1);
  return b;
}

void ExpectSameBlock(const proto::BlockDesc& want, const proto::BlockDesc& got) {
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(want, got))
      << "want:\n" << want.DebugString() << "got:\n" << got.DebugString();
}

std::vector<std::string> Types(const Graph& g, const std::vector<NodeId>& ops) {
  std::vector<std::string> out;
  for (NodeId o : ops) out.push_back(g.op(o).type());
  return out;
}

// A two-layer MLP with its backward ops and an sgd update per parameter
// (ParamOut is Param), written the way append_backward + optimizer would.
proto::BlockDesc MlpTrainBlock() {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {64, 784});
  AddVar(&b, "label", {64, 1}, proto::INT64);
  AddVar(&b, "w1", {784, 64}, proto::FP32, true);
  AddVar(&b, "b1", {64}, proto::FP32, true);
  AddVar(&b, "w2", {64, 10}, proto::FP32, true);
  AddVar(&b, "lr", {1}, proto::FP32, true);
  for (const char* n : {"h1", "a1", "r1"}) AddVar(&b, n, {64, 64});
  AddVar(&b, "logits", {64, 10});
  AddVar(&b, "sm", {64, 10});
  AddVar(&b, "loss", {64, 1});
  AddVar(&b, "avg", {1});
  for (const char* n : {"avg", "loss", "logits", "r1", "w2", "a1", "h1", "b1", "w1"}) {
    *b.add_vars() = Var(GradVarName(n), VarDims(*FindVarDesc(b, n)));
  }
  auto add = [&](const proto::OpDesc& op) { *b.add_ops() = op; };
  add(OpBuilder("matmul").In("X", {"x"}).In("Y", {"w1"}).Out("Out", {"h1"}).Attr("transpose_Y", false).Build());
  add(OpBuilder("elementwise_add").In("X", {"h1"}).In("Y", {"b1"}).Out("Out", {"a1"}).Attr("axis", int64_t{-1})
          .Build());
  add(OpBuilder("relu").In("X", {"a1"}).Out("Out", {"r1"}).Build());
  add(OpBuilder("matmul").In("X", {"r1"}).In("Y", {"w2"}).Out("Out", {"logits"}).Build());
  add(OpBuilder("softmax_with_cross_entropy")
          .In("Logits", {"logits"})
          .In("Label", {"label"})
          .Out("Softmax", {"sm"})
          .Out("Loss", {"loss"})
          .Build());
  add(OpBuilder("mean").In("X", {"loss"}).Out("Out", {"avg"}).Build());
  add(OpBuilder("fill_constant")
          .Out("Out", {"avg@GRAD"})
          .Attr("shape", std::vector<int64_t>{1})
          .Attr("value", 1.0f)
          .Build());
  add(OpBuilder("mean_grad").In("X", {"loss"}).In("Out@GRAD", {"avg@GRAD"}).Out("X@GRAD", {"loss@GRAD"}).Build());
  add(OpBuilder("softmax_with_cross_entropy_grad")
          .In("Label", {"label"})
          .In("Softmax", {"sm"})
          .In("Loss@GRAD", {"loss@GRAD"})
          .Out("Logits@GRAD", {"logits@GRAD"})
          .Build());
  add(OpBuilder("matmul_grad")
          .In("X", {"r1"})
          .In("Y", {"w2"})
          .In("Out@GRAD", {"logits@GRAD"})
          .Out("X@GRAD", {"r1@GRAD"})
          .Out("Y@GRAD", {"w2@GRAD"})
          .Build());
  add(OpBuilder("relu_grad").In("Out", {"r1"}).In("Out@GRAD", {"r1@GRAD"}).Out("X@GRAD", {"a1@GRAD"}).Build());
  add(OpBuilder("elementwise_add_grad")
          .In("X", {"h1"})
          .In("Y", {"b1"})
          .In("Out@GRAD", {"a1@GRAD"})
          .Out("X@GRAD", {"h1@GRAD"})
          .Out("Y@GRAD", {"b1@GRAD"})
          .Build());
  add(OpBuilder("matmul_grad")
          .In("X", {"x"})
          .In("Y", {"w1"})
          .In("Out@GRAD", {"h1@GRAD"})
          .Out("X@GRAD", {kEmptyVarName})
          .Out("Y@GRAD", {"w1@GRAD"})
          .Build());
  for (const char* p : {"w1", "b1", "w2"}) {
    add(OpBuilder("sgd")
            .In("Param", {p})
            .In("Grad", {GradVarName(p)})
            .In("LearningRate", {"lr"})
            .Out("ParamOut", {p})
            .Build());
  }
  return b;
}

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

proto::BlockDesc InPlaceBlock() {
  proto::BlockDesc b = NewBlock();
  AddVar(&b, "x", {2, 3});
  AddVar(&b, "w", {3, 3}, proto::FP32, true);
  AddVar(&b, "g", {3, 3});
  AddVar(&b, "lr", {1}, proto::FP32, true);
  AddVar(&b, "y", {2, 3});
  AddVar(&b, "z", {3, 3});
  *b.add_ops() = OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"y"}).Build();
  *b.add_ops() = OpBuilder("sgd")
                     .In("Param", {"w"})
                     .In("Grad", {"g"})
                     .In("LearningRate", {"lr"})
                     .Out("ParamOut", {"w"})
                     .Build();
  *b.add_ops() = OpBuilder("scale").In("X", {"w"}).Out("Out", {"z"}).Attr("scale", 2.0f).Build();
  return b;
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
