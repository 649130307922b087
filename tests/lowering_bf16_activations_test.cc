// bf16_activations (--amp bf16): a value a generated kernel computes that only
// bf16 matmuls read is stored in bf16 alone and bound without a reorder.
// Golden traces for the step firing and not firing, and the numbers against
// the f32 reference kernels within the bf16 bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "tests/bf16_util.h"
#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

// The backward of y = x w + b from dy, scaled by 0.5 first (a generated
// kernel computes dY = 0.5 dy and b's gradient): dx, b's gradient, and sgd
// on w (the weight gradient folds into the step).
LoweringCase ScaledBackward(const std::string& name, int64_t m, int64_t k, int64_t n) {
  LoweringCase c;
  c.name = name;
  c.ops = {OpBuilder("scale").In("X", {"dy"}).Out("Out", {"g"}).Attr("scale", 0.5f).Build(),
           OpBuilder("elementwise_add_grad")
               .In("Y", {"b"})
               .In("Out@GRAD", {"g"})
               .Out("X@GRAD", {"mm@GRAD"})
               .Out("Y@GRAD", {"b@GRAD"})
               .Build(),
           OpBuilder("matmul_grad")
               .In("X", {"x"})
               .In("Y", {"w"})
               .In("Out@GRAD", {"mm@GRAD"})
               .Out("X@GRAD", {"x@GRAD"})
               .Out("Y@GRAD", {"w@GRAD"})
               .Build(),
           OpBuilder("sgd").In("Param", {"w"}).In("Grad", {"w@GRAD"}).In("LearningRate", {"lr"}).Out("ParamOut", {"w"}).Build()};
  c.inputs = {{"dy", {m, n}}, {"b", {n}}, {"x", {m, k}}, {"w", {k, n}}, {"lr", {1}}};
  c.outputs = {"b@GRAD", "x@GRAD", "w"};
  c.options.amp_compute = ComputeType::kBF16;
  return c;
}


// Each output's own bound: dX contracts over n, W's step over m (times lr,
// up to 2); b's gradient is an f32 sum.
std::map<std::string, double> Bounds(int64_t m, int64_t n) {
  return {{"x@GRAD", Bf16Atol(n)}, {"w", 2 * Bf16Atol(m)}, {"b@GRAD", 1e-5 * m}};
}

TEST(Bf16ActivationsTest, TheGradientIsStoredInBf16ForBothMatmuls) {
  KILN_SKIP_WITHOUT_BF16();
  CheckLoweringGolden(ScaledBackward("bf16_activations", 37, 29, 19));
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 19}, {5, 64, 33}, {130, 17, 96}}) {
    LoweringCase c = ScaledBackward("bf16_activations", m, k, n);
    c.output_atol = Bounds(m, n);
    const auto obj = CheckLoweringNumerics(c, 0, 0);
    EXPECT_TRUE(StepMatched(*obj, "bf16_activations")) << obj->lowering;
    const std::string listing = obj->Listing();
    EXPECT_NE(listing.find("mm@GRAD@BF16 : bf16["), std::string::npos) << listing;
    EXPECT_NE(listing.find(",1]:bf16 fusing scale elementwise_add_grad"), std::string::npos) << listing;  // its store
    EXPECT_NE(listing.find(", X stored in bf16"), std::string::npos) << listing;
    EXPECT_NE(listing.find(", dY stored in bf16"), std::string::npos) << listing;
    EXPECT_EQ(listing.find(" mm@GRAD : "), std::string::npos) << "the f32 value is never written\n" << listing;
  }
}

// When X dies at the fold and is bigger than W, sgd_before_dx runs the step
// first and dX = dY W_old^T after it: that dX reads the bf16 dY too.
TEST(Bf16ActivationsTest, TheInputGradientFromTheOldWeightReadsItToo) {
  KILN_SKIP_WITHOUT_BF16();
  LoweringCase c = ScaledBackward("bf16_activations_sgd_first", 130, 17, 96);
  c.donatable = {"x"};
  CheckLoweringGolden(c);
  c.output_atol = Bounds(130, 96);
  const auto obj = CheckLoweringNumerics(c, 0, 0);
  EXPECT_TRUE(StepMatched(*obj, "sgd_before_dx")) << obj->lowering;
  EXPECT_TRUE(StepMatched(*obj, "bf16_activations")) << obj->lowering;
  const std::string listing = obj->Listing();
  EXPECT_NE(listing.find("mm@GRAD@BF16, %"), std::string::npos) << listing;
  EXPECT_NE(listing.find("w@OLD -> "), std::string::npos) << listing;
  EXPECT_NE(listing.find(", X stored in bf16"), std::string::npos) << listing;
}

TEST(Bf16ActivationsTest, DoesNotFireForAValueLeavingTheClusterOrInF32) {
  KILN_SKIP_WITHOUT_BF16();
  LoweringCase out = ScaledBackward("bf16_activations_output", 37, 29, 19);
  out.outputs.push_back("mm@GRAD");  // read after the cluster: kept f32
  CheckLoweringGolden(out);
  out.output_atol = Bounds(37, 19);
  const auto obj = CheckLoweringNumerics(out, 1e-5, 0);
  EXPECT_FALSE(StepMatched(*obj, "bf16_activations")) << obj->lowering;
  // A reader that is not a matmul (a softmax over the gradient) keeps it f32.
  LoweringCase other = ScaledBackward("bf16_activations_other_reader", 37, 29, 19);
  other.ops.push_back(OpBuilder("softmax").In("X", {"mm@GRAD"}).Out("Out", {"sm"}).Build());
  other.outputs.push_back("sm");
  CheckLoweringGolden(other);
  other.output_atol = Bounds(37, 19);
  const auto obj2 = CheckLoweringNumerics(other, 1e-5, 0);
  EXPECT_FALSE(StepMatched(*obj2, "bf16_activations")) << obj2->lowering;
  LoweringCase f32 = ScaledBackward("bf16_activations_f32", 37, 29, 19);
  f32.options.amp_compute = ComputeType::kF32;
  EXPECT_FALSE(StepMatched(*CheckLoweringNumerics(f32, 1e-4, 1e-4), "bf16_activations"));
}

}  // namespace
}  // namespace kiln::test
