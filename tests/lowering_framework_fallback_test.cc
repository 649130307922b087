// Lowering step framework_fallback (compiler/lowering/framework_fallback.h)
// and per-unit fallback (compiler/lower.cc): a unit that cannot be compiled
// falls back alone to framework kernels while the rest stays compiled.
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

// X [2,3,2,3,2,3] + Y [2,1,2,1,2,1] alternates broadcast in every dim: its
// group cannot be laid out in 4 dims. The relu chain beside it compiles.
LoweringCase Uncollapsible(const std::string& name) {
  LoweringCase c;
  c.name = name;
  c.ops = {OpBuilder("elementwise_add").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"sum"}).Build(),
           OpBuilder("relu").In("X", {"z"}).Out("Out", {"r"}).Build(),
           OpBuilder("scale").In("X", {"r"}).Out("Out", {"s"}).Attr("scale", 3.0f).Build()};
  c.inputs = {{"x", {2, 3, 2, 3, 2, 3}}, {"y", {2, 1, 2, 1, 2, 1}}, {"z", {4, 9}}};
  c.outputs = {"sum", "s"};
  return c;
}

TEST(FrameworkFallbackTest, AUnitThatCannotBeCompiledFallsBackAlone) {
  const LoweringCase c = Uncollapsible("framework_fallback_unit");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  ASSERT_EQ(obj->unit_fallbacks.size(), 1u) << obj->lowering;
  EXPECT_NE(obj->unit_fallbacks[0].find("ew_group of #0 elementwise_add (step elementwise_groups)"),
            std::string::npos)
      << obj->unit_fallbacks[0];
  // The add runs its framework oneDNN kernel; relu and scale stay generated.
  EXPECT_TRUE(StepMatched(*obj, "onednn_anchors")) << obj->lowering;
  EXPECT_TRUE(StepMatched(*obj, "elementwise_groups")) << obj->lowering;
  // Without oneDNN, the reference kernel.
  LoweringCase reference = c;
  reference.options.use_onednn = false;
  const auto ref = CheckLoweringNumerics(reference);
  EXPECT_EQ(ref->unit_fallbacks.size(), 1u) << ref->lowering;
  EXPECT_TRUE(StepMatched(*ref, "framework_fallback")) << ref->lowering;
}

// Everything lowers: the last step has nothing left to take.
TEST(FrameworkFallbackTest, DoesNotFireWhenEveryOpIsClaimed) {
  LoweringCase c = Uncollapsible("framework_fallback_not_fired");
  c.ops.erase(c.ops.begin());
  c.inputs.erase(c.inputs.begin(), c.inputs.begin() + 2);
  c.outputs = {"s"};
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_FALSE(StepMatched(*obj, "framework_fallback")) << obj->lowering;
  EXPECT_TRUE(obj->unit_fallbacks.empty());
}

}  // namespace
}  // namespace kiln::test
