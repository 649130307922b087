// Lowering step dead_ops (compiler/lowering/dead_ops.h), the cluster's dead
// ops (Cluster::dead) and the dims-only buffers they leave
// (compiler/lowering/buffers.h).
#include <gtest/gtest.h>

#include "compiler/compiled_object.h"
#include "compiler/lowering/buffers.h"
#include "compiler/lowering/cluster.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

proto::OpDesc Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out}).Build();
}

// The ops the case's cluster finds dead.
std::vector<int> DeadOpsOf(const LoweringCase& c) {
  const JitSubgraph sg = MakeSubgraph(c);
  const jit::Cluster cluster(sg, SignatureOf(c), c.options, OpRegistry::Global());
  std::vector<int> dead;
  for (int i = 0; i < cluster.num_ops(); ++i) {
    if (cluster.dead(i)) dead.push_back(i);
  }
  return dead;
}

const runtime::BufferInfo* FindBuffer(const jit::CompiledObject& obj, const std::string& name) {
  for (const auto& b : obj.program.plan.buffers) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

// r = relu(x) and e = exp(x) leave the cluster; s = scale(r) and t = tanh(s)
// feed nothing that does: both are dropped.
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
  EXPECT_NE(obj->lowering.find("#1 scale -> dropped"), std::string::npos) << obj->lowering;
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

// elementwise_add_grad reads Y (w's relu) for its dims alone: relu is dead,
// and y is a dims-only buffer, with no memory, that no kernel writes.
TEST(DeadOpsTest, AValueReadForItsDimsAloneIsDroppedAndBoundWithoutMemory) {
  LoweringCase c;
  c.name = "dead_ops_dims_reader";
  c.ops = {Unary("relu", "w", "y"), OpBuilder("elementwise_add_grad")
                                        .In("Y", {"y"})
                                        .In("Out@GRAD", {"dout"})
                                        .Out("X@GRAD", {"dx"})
                                        .Out("Y@GRAD", {"dy"})
                                        .Build()};
  c.inputs = {{"w", {9}}, {"dout", {4, 9}}};
  c.outputs = {"dx", "dy"};
  EXPECT_EQ(DeadOpsOf(c), std::vector<int>{0});
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_TRUE(obj->unit_fallbacks.empty()) << obj->lowering;
  // Without elementwise fusion the grad runs its framework kernel on y's dims.
  c.options.fuse_elementwise = false;
  const auto framework = CheckLoweringNumerics(c);
  const runtime::BufferInfo* y = FindBuffer(*framework, "y");
  ASSERT_NE(y, nullptr) << framework->Listing();
  EXPECT_TRUE(y->dims_only) << framework->Listing();
  EXPECT_EQ(framework->program.plan.arena_bytes, 0u) << framework->Listing();
  EXPECT_NE(framework->Listing().find("y : f32[9] dims only"), std::string::npos) << framework->Listing();
}

// A dead reader does not hold a pattern back: the matmul's output feeds a
// bias add and a scale nothing uses, and the epilogue still fuses.
TEST(DeadOpsTest, ADeadReaderDoesNotBlockAFusion) {
  LoweringCase c;
  c.name = "dead_ops_reader";
  c.ops = {OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"m"}).Build(),
           OpBuilder("elementwise_add").In("X", {"m"}).In("Y", {"b"}).Out("Out", {"o"}).Build(),
           OpBuilder("scale").In("X", {"m"}).Out("Out", {"d"}).Attr("scale", 2.0f).Build()};
  c.inputs = {{"x", {5, 7}}, {"w", {7, 3}}, {"b", {3}}};
  c.outputs = {"o"};
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_TRUE(StepMatched(*obj, "matmul_epilogue")) << obj->lowering;
  EXPECT_EQ(obj->program.plan.temp_arena_bytes, 0u) << obj->Listing();  // no temp: the dead scale keeps none
}

// The program builder's invariant: a var the units read as data must be
// written in the cluster. A kernel list that leaves it unwritten (a lowering
// bug) is refused, naming the var.
class CopyKernel final : public runtime::Kernel {
 public:
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "copy"; }
  void Run(const runtime::BufferView*) const override {}

 private:
  std::string name_ = "copy";
};

TEST(DeadOpsTest, AVarReadAsDataThatNothingWritesIsRefused) {
  LoweringCase c;
  c.name = "unwritten";
  c.ops = {Unary("relu", "x", "y"), Unary("exp", "y", "e")};
  c.inputs = {{"x", {6}}};
  c.outputs = {"e"};
  const JitSubgraph sg = MakeSubgraph(c);
  const jit::Cluster cluster(sg, SignatureOf(c), c.options, OpRegistry::Global());
  jit::EmittedKernel exp_only;  // reads y; nothing writes it
  exp_only.kernel = std::make_shared<CopyKernel>();
  exp_only.args = {"y", "e"};
  exp_only.num_inputs = 1;
  jit::CompiledObject unread, read;
  jit::BuildProgram(cluster, {exp_only}, {}, &unread);
  EXPECT_TRUE(FindBuffer(unread, "y")->dims_only);
  try {
    jit::BuildProgram(cluster, {exp_only}, {"y"}, &read);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("var 'y' is read as data inside the cluster, but no kernel writes it"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::test
