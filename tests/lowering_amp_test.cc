// Lowering under --amp bf16 (CompileOptions::amp_compute): the matmul
// and conv steps create bf16 oneDNN kernels, batch_one keeps its f32 gemv kernels
// out, and compiled objects of the two compute types are kept apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "tests/bf16_util.h"
#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

LoweringCase Bf16(LoweringCase c) {
  c.options.amp_compute = ComputeType::kBF16;
  return c;
}


TEST(LoweringAmpTest, MatmulEpilogueRunsInBf16) {
  KILN_SKIP_WITHOUT_BF16();
  LoweringCase c;
  c.name = "amp_matmul_epilogue";
  c.ops = {OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"mm"}).Build(),
           OpBuilder("elementwise_add").In("X", {"mm"}).In("Y", {"b"}).Out("Out", {"sum"}).Build(),
           OpBuilder("relu").In("X", {"sum"}).Out("Out", {"y"}).Build()};
  c.inputs = {{"x", {5, 33}}, {"w", {33, 17}}, {"b", {17}}};
  c.outputs = {"y"};
  const auto obj = CheckLoweringNumerics(Bf16(c), Bf16Atol(33), 0);
  EXPECT_TRUE(StepMatched(*obj, "matmul_epilogue")) << obj->lowering;
  const std::string listing = obj->Listing();
  EXPECT_NE(listing.find("amp_compute=bf16"), std::string::npos) << listing;
  EXPECT_NE(listing.find("in bf16 (f32 accumulation) + bias + relu post-op"), std::string::npos) << listing;
}

TEST(LoweringAmpTest, ConvEpilogueRunsInBf16) {
  KILN_SKIP_WITHOUT_BF16();
  // K = C/groups * KH * KW: 3 * 3 * 3, and 2 * 3 * 3 with groups.
  const LoweringCase plain = ConvBiasAct("amp_conv_epilogue", true, "relu", {2, 3, 9, 7}, {5, 3, 3, 3}, 1, 1, 1);
  const LoweringCase grouped = ConvBiasAct("amp_conv_groups", true, "gelu", {1, 4, 11, 9}, {6, 2, 3, 3}, 2, 1, 2);
  for (const auto& [c, k] : {std::pair{plain, 27}, std::pair{grouped, 18}}) {
    const auto obj = CheckLoweringNumerics(Bf16(c), Bf16Atol(k), 0);
    EXPECT_TRUE(StepMatched(*obj, "conv_epilogue")) << obj->lowering;
    const std::string listing = obj->Listing();
    EXPECT_NE(listing.find("amp_compute=bf16"), std::string::npos) << listing;
    EXPECT_NE(listing.find("oneDNN convolution ("), std::string::npos) << listing;
    EXPECT_NE(listing.find(") in bf16 (f32 accumulation) + bias +"), std::string::npos) << listing;
  }
}

TEST(LoweringAmpTest, WeightGradFoldInBf16AndNoGemvAtBatchOne) {
  KILN_SKIP_WITHOUT_BF16();
  for (int64_t m : {1, 7}) {
    const LoweringCase c = Bf16(GradAndSgd("amp_grad_sgd", m, 37, 19, true));
    // W moves by lr * X^T dY (lr is an input in [-2, 2), so up to 2x the
    // product's error); dX = dY W^T sums over N = 19.
    const auto obj = CheckLoweringNumerics(c, 2 * Bf16Atol(std::max<int64_t>(m, 19)), 0);
    EXPECT_TRUE(StepMatched(*obj, "weight_grad_fold")) << obj->lowering;
    EXPECT_FALSE(StepMatched(*obj, "batch_one")) << obj->lowering;
    EXPECT_NE(obj->Listing().find("in bf16 (f32 accumulation) W -= lr * X^T dY"), std::string::npos)
        << obj->Listing();
  }
}

TEST(LoweringAmpTest, CompileOptionsKeyTheComputeType) {
  jit::CompileOptions f32 = LoweringCase::DefaultOptions(), bf16 = f32;
  bf16.amp_compute = ComputeType::kBF16;
  EXPECT_FALSE(f32 == bf16);
  EXPECT_NE(f32.Hash(), bf16.Hash());
}

}  // namespace
}  // namespace kiln::test
