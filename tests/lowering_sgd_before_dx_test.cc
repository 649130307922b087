// Lowering step sgd_before_dx (compiler/lowering/sgd_before_dx.h).
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"
#include "tests/program_resize_util.h"

namespace kiln::test {
namespace {

// X is made in the cluster (by a relu) and dies at the fold; it is bigger
// than W, so the step runs first and dX follows from the old W.
LoweringCase DyingX(const std::string& name) {
  LoweringCase c = GradAndSgd(name, 64, 8, 3, true);
  c.ops.insert(c.ops.begin(), OpBuilder("relu").In("X", {"x0"}).Out("Out", {"x"}).Build());
  c.inputs[0] = {"x0", {64, 8}};
  return c;
}

TEST(SgdBeforeDxTest, StepRunsFirstWhenXDiesAndIsBiggerThanW) {
  const LoweringCase c = DyingX("sgd_before_dx");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_TRUE(StepMatched(*obj, "sgd_before_dx")) << obj->lowering;
  EXPECT_NE(obj->Listing().find("w@OLD"), std::string::npos) << obj->Listing();
}

TEST(SgdBeforeDxTest, DoesNotFireWhenXLeavesTheCluster) {
  LoweringCase c = DyingX("sgd_before_dx_not_fired");
  c.outputs.push_back("x");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_FALSE(StepMatched(*obj, "sgd_before_dx")) << obj->lowering;
}

// Dynamic shapes: the step (keeping the old W) and dX compiled for 64 rows,
// resized to others.
TEST(SgdBeforeDxTest, KernelsResizeToOtherRows) {
  auto rows = [](int64_t m) {
    LoweringCase c = DyingX("sgd_before_dx_resize");
    c.inputs[0] = {"x0", {m, 8}};
    for (auto& [name, dims] : c.inputs) {
      if (dims.size() == 2 && dims[0] == 64) dims[0] = m;
    }
    return c;
  };
  CheckResizedPrograms(rows(64), {rows(17), rows(144)}, {"matmul_sgd"}, 1e-5, 1e-4);
}

}  // namespace
}  // namespace kiln::test
