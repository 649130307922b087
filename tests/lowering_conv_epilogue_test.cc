// Lowering step conv_epilogue (compiler/lowering/conv_epilogue.h).
#include <gtest/gtest.h>

#include "tests/lowering_test_util.h"

namespace kiln::test {
namespace {

TEST(ConvEpilogueTest, BiasAndReluBecomeOneConvolution) {
  const LoweringCase c = ConvBiasAct("conv_epilogue", true, "relu", {2, 3, 9, 7}, {5, 3, 3, 3}, 1, 1, 1);
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_TRUE(StepMatched(*obj, "conv_epilogue")) << obj->lowering;
  ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  EXPECT_NE(obj->program.instructions[0].kernel->Describe().find("+ bias + relu post-op"), std::string::npos)
      << obj->Listing();
}

// Bias alone, relu alone, gelu, strides, padding, groups, odd sizes, batch 1.
TEST(ConvEpilogueTest, EveryFormAgreesWithTheReferenceKernels) {
  struct Form {
    bool bias;
    std::string act;
    Dims input, filter;
    int64_t stride, pad, groups;
  };
  const std::vector<Form> forms = {{true, "", {3, 2, 8, 8}, {4, 2, 3, 3}, 1, 0, 1},
                                   {false, "relu", {1, 3, 11, 5}, {6, 3, 5, 3}, 2, 2, 1},
                                   {true, "gelu", {2, 4, 7, 9}, {6, 2, 3, 3}, 1, 1, 2},
                                   {true, "relu", {1, 1, 28, 28}, {6, 1, 5, 5}, 1, 0, 1}};
  for (const Form& f : forms) {
    const LoweringCase c = ConvBiasAct("form", f.bias, f.act, f.input, f.filter, f.stride, f.pad, f.groups);
    SCOPED_TRACE(DimsToString(f.input) + " " + f.act);
    const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
    EXPECT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  }
}

// The conv's output is also read elsewhere: nothing may be folded; the conv
// stays a oneDNN anchor and the add and relu a generated kernel.
TEST(ConvEpilogueTest, DoesNotFireWhenTheConvOutputIsNeeded) {
  LoweringCase c = ConvBiasAct("conv_epilogue_not_fired", true, "relu", {2, 3, 9, 7}, {5, 3, 3, 3}, 1, 1, 1);
  c.outputs.push_back("conv");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-5, 1e-4);
  EXPECT_FALSE(StepMatched(*obj, "conv_epilogue")) << obj->lowering;
}

}  // namespace
}  // namespace kiln::test
