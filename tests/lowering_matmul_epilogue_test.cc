// Lowering step matmul_epilogue (compiler/lowering/matmul_epilogue.h).
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"
#include "tests/program_resize_util.h"

namespace kiln::test {
namespace {

LoweringCase MatmulBiasAct(const std::string& name, const std::string& act, bool approximate = false) {
  LoweringCase c;
  c.name = name;
  c.ops = {OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"mm"}).Build(),
           OpBuilder("elementwise_add").In("X", {"mm"}).In("Y", {"b"}).Out("Out", {"sum"}).Build()};
  std::string out = "sum";
  if (!act.empty()) {
    OpBuilder a(act);
    a.In("X", {"sum"}).Out("Out", {"act"});
    if (act == "gelu") a.Attr("approximate", approximate);
    c.ops.push_back(a.Build());
    out = "act";
  }
  c.inputs = {{"x", {6, 5}}, {"w", {5, 7}}, {"b", {7}}};
  c.outputs = {out};
  return c;
}

TEST(MatmulEpilogueTest, BiasAndReluBecomeOnePrimitive) {
  const LoweringCase c = MatmulBiasAct("matmul_epilogue_relu", "relu");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_TRUE(StepMatched(*obj, "matmul_epilogue")) << obj->lowering;
  ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  EXPECT_NE(obj->program.instructions[0].kernel->Describe().find("+ bias + relu post-op"), std::string::npos);
}

TEST(MatmulEpilogueTest, BiasAloneAndGeluForms) {
  for (const auto& [act, approximate] : {std::pair<std::string, bool>{"", false}, {"gelu", false}, {"gelu", true}}) {
    SCOPED_TRACE(act + (approximate ? " approximate" : ""));
    const auto obj = CheckLoweringNumerics(MatmulBiasAct("bias_" + act, act, approximate), 1e-5, 1e-4);
    EXPECT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  }
}

// The matmul's output is read twice and the bias is made in the cluster:
// nothing may be folded.
TEST(MatmulEpilogueTest, DoesNotFireWhenTheIntermediateIsNeededOrTheBiasIsMadeInside) {
  LoweringCase c = MatmulBiasAct("matmul_epilogue_not_fired", "relu");
  c.ops.push_back(OpBuilder("scale").In("X", {"mm"}).Out("Out", {"mm2"}).Attr("scale", 2.0f).Build());
  c.outputs.push_back("mm2");
  CheckLoweringGolden(c);
  auto obj = CheckLoweringNumerics(c);
  EXPECT_FALSE(StepMatched(*obj, "matmul_epilogue")) << obj->lowering;

  LoweringCase made = MatmulBiasAct("bias_made_inside", "");
  made.ops.insert(made.ops.begin(), OpBuilder("scale").In("X", {"b0"}).Out("Out", {"b"}).Build());
  made.inputs = {{"b0", {7}}, {"x", {6, 5}}, {"w", {5, 7}}};
  obj = CheckLoweringNumerics(made);
  EXPECT_FALSE(StepMatched(*obj, "matmul_epilogue")) << obj->lowering;
}

// Dynamic shapes: the fused matmul compiled for 6 rows, resized to others
// (1 row, where a fresh compile would take the batch-1 gemv, is a oneDNN
// matmul of one row).
TEST(MatmulEpilogueTest, FusedMatmulResizesToOtherRows) {
  for (const char* act : {"relu", "gelu"}) {
    std::vector<LoweringCase> others;
    for (int64_t m : {1, 17, 144}) {
      others.push_back(MatmulBiasAct(std::string("resize_") + act, act));
      others.back().inputs[0] = {"x", {m, 5}};
    }
    CheckResizedPrograms(MatmulBiasAct(std::string("resize_") + act, act), others, {"matmul"});
  }
}

}  // namespace
}  // namespace kiln::test
