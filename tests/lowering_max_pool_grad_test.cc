// Lowering step max_pool_grad (compiler/lowering/max_pool_grad.h).
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"
#include "tests/program_resize_util.h"

namespace kiln::test {
namespace {

// pool2d then its grad, so that Out is the max of each window (the kernel
// finds the first maximum equal to Out).
LoweringCase PoolAndGrad(const std::string& name, int64_t k, Dims x_dims) {
  LoweringCase c;
  c.name = name;
  const std::vector<int64_t> window = {k, k};
  c.ops = {OpBuilder("pool2d").In("X", {"x"}).Out("Out", {"p"}).Attr("ksize", window).Attr("strides", window).Build(),
           OpBuilder("pool2d_grad")
               .In("X", {"x"})
               .In("Out", {"p"})
               .In("Out@GRAD", {"dp"})
               .Out("X@GRAD", {"dx"})
               .Attr("ksize", window)
               .Attr("strides", window)
               .Build()};
  Dims out = x_dims;
  out[2] /= k;
  out[3] /= k;
  c.inputs = {{"x", x_dims}, {"dp", out}};
  c.outputs = {"p", "dx"};
  return c;
}

TEST(MaxPoolGradTest, TwoByTwoStrideTwoBecomesTheKilnKernel) {
  const LoweringCase c = PoolAndGrad("max_pool_grad", 2, {2, 3, 4, 6});
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_TRUE(StepMatched(*obj, "max_pool_grad")) << obj->lowering;
  CheckLoweringNumerics(PoolAndGrad("odd_planes", 2, {3, 5, 8, 2}));
}

TEST(MaxPoolGradTest, DoesNotFireForThreeByThree) {
  const LoweringCase c = PoolAndGrad("max_pool_grad_not_fired", 3, {2, 3, 6, 6});
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_FALSE(StepMatched(*obj, "max_pool_grad")) << obj->lowering;
}

// Dynamic shapes: the gradient kernel (and pool2d, a framework kernel that
// reads its dims at run time) serve other batches, channels and planes with
// H and W even; an odd plane is refused.
TEST(MaxPoolGradTest, KernelResizesToOtherEvenPlanes) {
  CheckResizedPrograms(PoolAndGrad("max_pool_grad_resize", 2, {2, 3, 4, 6}),
                       {PoolAndGrad("max_pool_grad_resize", 2, {1, 3, 8, 2}),
                        PoolAndGrad("max_pool_grad_resize", 2, {5, 7, 2, 10})},
                       {"maxpool_grad"});
  const auto obj = LowerCase(PoolAndGrad("max_pool_grad_resize", 2, {2, 3, 4, 6}));
  for (const auto& ins : obj->program.instructions) {
    if (ins.kernel->name() != "maxpool_grad_0") continue;
    std::string why;
    EXPECT_EQ(ins.kernel->Resize({{2, 3, 5, 6}, {2, 3, 2, 3}, {2, 3, 2, 3}, {2, 3, 5, 6}}, &why), nullptr);
    EXPECT_EQ(why, "maxpool_grad_0: X must be [N, C, H, W] with H and W even and no zero dim, got [2,3,5,6]");
  }
}

}  // namespace
}  // namespace kiln::test
