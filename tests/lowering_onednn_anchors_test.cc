// Lowering step onednn_anchors (compiler/lowering/onednn_anchors.h).
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

LoweringCase SoftmaxAndLayerNorm(const std::string& name) {
  LoweringCase c;
  c.name = name;
  c.ops = {OpBuilder("softmax").In("X", {"x"}).Out("Out", {"p"}).Build(),
           OpBuilder("layer_norm")
               .In("X", {"p"})
               .Out("Y", {"y"})
               .Out("Mean", {"mean"})
               .Out("Variance", {"var"})
               .Attr("begin_norm_axis", int64_t{1})
               .Build()};
  c.inputs = {{"x", {6, 19}}};
  c.outputs = {"y"};
  return c;
}

TEST(OneDnnAnchorsTest, OpsWithAOneDnnKernelRunIt) {
  const LoweringCase c = SoftmaxAndLayerNorm("onednn_anchors");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_TRUE(StepMatched(*obj, "onednn_anchors")) << obj->lowering;
}

TEST(OneDnnAnchorsTest, DoesNotFireWithoutOneDnn) {
  LoweringCase c = SoftmaxAndLayerNorm("onednn_anchors_not_fired");
  c.options.use_onednn = false;
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_FALSE(StepMatched(*obj, "onednn_anchors")) << obj->lowering;
  EXPECT_TRUE(StepMatched(*obj, "framework_fallback")) << obj->lowering;
}

}  // namespace
}  // namespace kiln::test
