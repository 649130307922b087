// Lowering step elementwise_groups (compiler/lowering/elementwise_groups.h).
// Every op and its parity on both ISAs is in jit_ops_test; here, where the
// grouping puts fragments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "compiler/codegen/ew_runtime_kernel.h"
#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

// relu -> add of a broadcast row -> its grad; a matmul (another space) in
// between does not split the group of the ops around it that it does not
// depend on.
LoweringCase Chain(const std::string& name) { return ReluMatmulBiasGrad(name, 9); }

TEST(ElementwiseGroupsTest, FragmentsOfOneSpaceShareAKernel) {
  const LoweringCase c = Chain("elementwise_groups");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-5);
  EXPECT_TRUE(StepMatched(*obj, "elementwise_groups")) << obj->lowering;
  int generated = 0;
  for (const auto& ins : obj->program.instructions) generated += ins.kernel->name().rfind("ew_", 0) == 0;
  EXPECT_EQ(generated, 1) << obj->Listing();
}

TEST(ElementwiseGroupsTest, DoesNotFireWithoutFusion) {
  LoweringCase c = Chain("elementwise_groups_not_fired");
  c.options.fuse_elementwise = false;
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-5);
  EXPECT_FALSE(StepMatched(*obj, "elementwise_groups")) << obj->lowering;
}

// Forty scale ops over [1] vars (as adam's beta powers of forty parameters)
// would share one space: the groups split so that no kernel takes more than
// kMaxEwOperands inputs or outputs. A sum of more inputs than one kernel
// takes runs on its framework kernel.
TEST(ElementwiseGroupsTest, GroupsStayWithinTheOperandLimit) {
  LoweringCase c;
  c.name = "elementwise_groups_operand_limit";
  for (int i = 0; i < 80; ++i) {
    const std::string n = std::to_string(i);
    c.ops.push_back(OpBuilder("scale").In("X", {"p" + n}).Out("Out", {"q" + n}).Attr("scale", 0.5f).Build());
    c.inputs.push_back({"p" + n, {1}});
    c.outputs.push_back("q" + n);
  }
  std::vector<std::string> many;
  for (int i = 0; i < 70; ++i) many.push_back("q" + std::to_string(i));
  c.ops.push_back(OpBuilder("sum").In("X", many).Out("Out", {"total"}).Build());
  c.outputs.push_back("total");
  c.options.use_onednn = false;
  const auto obj = CheckLoweringNumerics(c, 1e-6, 1e-6);
  int groups = 0;
  for (const auto& ins : obj->program.instructions) {
    if (ins.kernel->name().rfind("ew_", 0) != 0) {
      EXPECT_EQ(ins.kernel->name(), "sum") << obj->Listing();
      continue;
    }
    ++groups;
    EXPECT_LE(ins.args.size(), 2 * jit::kMaxEwOperands) << obj->Listing();
  }
  EXPECT_EQ(groups, 2) << obj->Listing();  // 64 + 16 scales
}

// where(x > 0, log(x), x * x) and its gradient: the comparison's bool
// output and where's condition stay in registers of one generated kernel.
// With f64 values (which generated kernels do not hold) the same ops run
// their framework kernels in the cluster.
LoweringCase WhereOfLog(const std::string& name, DataType dtype) {
  LoweringCase c;
  c.name = name;
  c.ops = {OpBuilder("greater_than").In("X", {"x"}).In("Y", {"zero"}).Out("Out", {"pos"}).Build(),
           OpBuilder("log").In("X", {"x"}).Out("Out", {"lx"}).Build(),
           OpBuilder("elementwise_mul").In("X", {"x"}).In("Y", {"x"}).Out("Out", {"sq"}).Build(),
           OpBuilder("where").In("Condition", {"pos"}).In("X", {"lx"}).In("Y", {"sq"}).Out("Out", {"out"}).Build(),
           OpBuilder("where_grad")
               .In("Condition", {"pos"})
               .In("X", {"lx"})
               .In("Y", {"sq"})
               .In("Out@GRAD", {"dout"})
               .Out("X@GRAD", {"dlx"})
               .Out("Y@GRAD", {"dsq"})
               .Build(),
           OpBuilder("log_grad").In("X", {"x"}).In("Out@GRAD", {"dlx"}).Out("X@GRAD", {"dx_log"}).Build(),
           OpBuilder("elementwise_mul_grad")
               .In("X", {"x"})
               .In("Y", {"x"})
               .In("Out@GRAD", {"dsq"})
               .Out("X@GRAD", {"dx_a"})
               .Out("Y@GRAD", {"dx_b"})
               .Build(),
           OpBuilder("elementwise_add").In("X", {"dx_log"}).In("Y", {"dx_a"}).Out("Out", {"dx_la"}).Build(),
           OpBuilder("elementwise_add").In("X", {"dx_la"}).In("Y", {"dx_b"}).Out("Out", {"dx"}).Build()};
  c.inputs = {{"x", {9, 17}}, {"zero", {1}}, {"dout", {9, 17}}};
  c.dtypes = {{"x", dtype}, {"zero", dtype}, {"dout", dtype}};
  Tensor zero(dtype, {1});
  std::memset(zero.raw_mutable_data(), 0, zero.bytes());
  c.given["zero"] = zero;
  c.outputs = {"out", "dx"};
  c.options.use_onednn = false;
  return c;
}

TEST(ElementwiseGroupsTest, WhereAndAComparisonFuseIntoTheGeneratedKernel) {
  const LoweringCase c = WhereOfLog("elementwise_groups_where", DataType::kFP32);
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-5);
  ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  const auto& kernel = *obj->program.instructions[0].kernel;
  EXPECT_EQ(kernel.name().rfind("ew_", 0), 0u) << obj->Listing();
  const std::vector<std::string> fused = kernel.fused_ops();
  for (const char* op : {"greater_than", "where", "where_grad"}) {
    EXPECT_NE(std::find(fused.begin(), fused.end(), op), fused.end()) << op << "\n" << obj->Listing();
  }
}

TEST(ElementwiseGroupsTest, WhereOfF64DoesNotFire) {
  const LoweringCase c = WhereOfLog("elementwise_groups_where_f64", DataType::kFP64);
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-12, 1e-12);
  EXPECT_FALSE(StepMatched(*obj, "elementwise_groups")) << obj->lowering;
  for (const auto& ins : obj->program.instructions) EXPECT_NE(ins.kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
}

}  // namespace
}  // namespace kiln::test
