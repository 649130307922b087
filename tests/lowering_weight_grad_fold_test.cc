// Lowering step weight_grad_fold (compiler/lowering/weight_grad_fold.h).
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"
#include "tests/program_resize_util.h"
#include "tests/op_test_util.h"

namespace kiln::test {
namespace {

TEST(WeightGradFoldTest, GradientAndSgdBecomeOneMatmul) {
  const LoweringCase c = GradAndSgd("weight_grad_fold", 6, 5, 7, true);
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_TRUE(StepMatched(*obj, "weight_grad_fold")) << obj->lowering;
  EXPECT_NE(obj->Listing().find("W -= lr * X^T dY"), std::string::npos) << obj->Listing();
  EXPECT_EQ(obj->Listing().find("dw"), std::string::npos) << "the weight gradient must not exist\n"
                                                          << obj->Listing();
  const auto no_dx = CheckLoweringNumerics(GradAndSgd("no_dx", 6, 5, 7, false), 1e-5, 1e-4);
  EXPECT_EQ(no_dx->program.instructions.size(), 1u) << no_dx->Listing();
}

TEST(WeightGradFoldTest, DoesNotFireWhenTheGradientIsReadElsewhere) {
  LoweringCase c = GradAndSgd("weight_grad_fold_not_fired", 6, 5, 7, true);
  c.ops.push_back(OpBuilder("scale").In("X", {"dw"}).Out("Out", {"dw2"}).Build());
  c.outputs.push_back("dw2");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_FALSE(StepMatched(*obj, "weight_grad_fold")) << obj->lowering;
}

// An sgd with L2 decay (regularization_coeff) needs lr * coeff * W, which the
// matmul primitive has no term for: it stays a generated update, and the
// numbers are the reference's.
TEST(WeightGradFoldTest, DoesNotFireForSgdWithL2Decay) {
  LoweringCase c = GradAndSgd("weight_grad_fold_l2", 6, 5, 7, true);
  int sgds = 0;
  for (proto::OpDesc& op : c.ops) {
    if (op.type() != "sgd") continue;
    SetAttr(&op, "regularization_coeff", 0.5f);
    ++sgds;
  }
  ASSERT_EQ(sgds, 1);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_FALSE(StepMatched(*obj, "weight_grad_fold")) << obj->lowering;
  EXPECT_EQ(obj->Listing().find("W -= lr * X^T dY"), std::string::npos) << obj->Listing();
  EXPECT_NE(obj->Listing().find("fusing sgd"), std::string::npos) << obj->Listing();
}

// Nor for a clipped sgd (GradScale, grad_clip_min/max): the step needs the
// gradient itself.
TEST(WeightGradFoldTest, DoesNotFireForSgdWithGradClip) {
  for (bool scaled : {false, true}) {
    LoweringCase c = GradAndSgd("weight_grad_fold_clip", 6, 5, 7, true);
    for (proto::OpDesc& op : c.ops) {
      if (op.type() != "sgd") continue;
      if (scaled) {
        SetInput(&op, "GradScale", {"s"});
      } else {
        SetAttr(&op, "grad_clip_min", -0.01f);
        SetAttr(&op, "grad_clip_max", 0.01f);
      }
    }
    if (scaled) {
      c.inputs.push_back({"s", {1}});
      c.given["s"] = FloatTensor({1}, {0.5f});
    }
    const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
    EXPECT_FALSE(StepMatched(*obj, "weight_grad_fold")) << obj->lowering;
    EXPECT_EQ(obj->Listing().find("W -= lr * X^T dY"), std::string::npos) << obj->Listing();
  }
}

// Dynamic shapes: the step and dX compiled for 6 rows, resized to others.
TEST(WeightGradFoldTest, KernelsResizeToOtherRows) {
  for (bool want_dx : {false, true}) {
    std::vector<LoweringCase> others;
    for (int64_t m : {17, 144, 3}) others.push_back(GradAndSgd("fold_resize", m, 5, 7, want_dx));
    CheckResizedPrograms(GradAndSgd("fold_resize", 6, 5, 7, want_dx), others, {"matmul_sgd"}, 1e-5, 1e-4);
  }
}

}  // namespace
}  // namespace kiln::test
