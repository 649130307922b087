// Lowering step batch_one (compiler/lowering/batch_one.h).
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

TEST(BatchOneTest, OneRowRunsMatrixVectorKernels) {
  const LoweringCase back = GradAndSgd("batch_one_backward", 1, 37, 19, true);
  CheckLoweringGolden(back);
  auto obj = CheckLoweringNumerics(back, 1e-5, 1e-4);
  EXPECT_TRUE(StepMatched(*obj, "batch_one")) << obj->lowering;
  EXPECT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  LoweringCase fwd;
  fwd.name = "batch_one_forward";
  fwd.ops = {OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"mm"}).Build(),
             OpBuilder("elementwise_add").In("X", {"mm"}).In("Y", {"b"}).Out("Out", {"sum"}).Build(),
             OpBuilder("relu").In("X", {"sum"}).Out("Out", {"y"}).Build()};
  fwd.inputs = {{"x", {1, 33}}, {"w", {33, 17}}, {"b", {17}}};
  fwd.outputs = {"y"};
  obj = CheckLoweringNumerics(fwd, 1e-5, 1e-4);
  EXPECT_TRUE(StepMatched(*obj, "batch_one")) << obj->lowering;
  EXPECT_NE(obj->Listing().find("kiln gemv"), std::string::npos) << obj->Listing();
}

TEST(BatchOneTest, DoesNotFireForTwoRows) {
  const LoweringCase c = GradAndSgd("batch_one_not_fired", 2, 37, 19, true);
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_FALSE(StepMatched(*obj, "batch_one")) << obj->lowering;
}

}  // namespace
}  // namespace kiln::test
