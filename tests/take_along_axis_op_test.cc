// take_along_axis: ONNX GatherElements' examples, negative indices, an
// Index smaller than Input in a dim other than Axis, i32 indices and other
// element dtypes, the scatter-add grad (repeated picks accumulate) and by
// finite differences, the errors, and the framework kernels in a cluster.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::Int64Tensor;
using test::TypedTensor;
using test::ValuesOf;

proto::OpDesc Take(int64_t axis) {
  return OpBuilder("take_along_axis").In("Input", {"x"}).In("Index", {"index"}).Out("Result", {"out"}).Attr("Axis", axis).Build();
}

Tensor Taken(int64_t axis, const Tensor& x, const Tensor& index) {
  return test::RunAndGet(Take(axis), {{"x", x}, {"index", index}}, "out");
}

// ONNX's test_gather_elements_0, _1 and _negative_indices.
TEST(TakeAlongAxisTest, OnnxGatherElementsExamples) {
  const Tensor x2 = FloatTensor({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(CompareTensors(Taken(1, x2, Int64Tensor({2, 2}, {0, 0, 1, 0})), FloatTensor({2, 2}, {1, 1, 4, 3}), 0, 0), "");
  const Tensor x3 = FloatTensor({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(CompareTensors(Taken(0, x3, Int64Tensor({2, 3}, {1, 2, 0, 2, 0, 0})),
                           FloatTensor({2, 3}, {4, 8, 3, 7, 2, 3}), 0, 0),
            "");
  EXPECT_EQ(CompareTensors(Taken(0, x3, TypedTensor<int32_t>({2, 3}, {-1, -2, 0, -2, 0, 0})),
                           FloatTensor({2, 3}, {7, 5, 3, 4, 2, 3}), 0, 0),
            "");
}

// Index [2, 1, 2] of Input [2, 3, 4] along axis 2 (and -1): dim 1 reads
// row 0 only, dim 2 picks.
TEST(TakeAlongAxisTest, SmallerIndexAndOtherDtypes) {
  std::vector<int64_t> v(24);
  for (int i = 0; i < 24; ++i) v[i] = i;
  const Tensor x = TypedTensor<int64_t>({2, 3, 4}, v);
  for (int64_t axis : {2, -1}) {
    const Tensor out = Taken(axis, x, Int64Tensor({2, 1, 2}, {3, 0, -1, 1}));
    EXPECT_EQ(out.dims(), (Dims{2, 1, 2}));
    EXPECT_EQ(ValuesOf<int64_t>(out), (std::vector<int64_t>{3, 0, 15, 13}));
  }
  EXPECT_EQ(ValuesOf<bool>(Taken(0, TypedTensor<bool>({2}, {false, true}), Int64Tensor({3}, {1, 0, 1}))),
            (std::vector<bool>{true, false, true}));
}

TEST(TakeAlongAxisGradTest, RepeatedPicksAccumulateAndMatchFiniteDifferences) {
  const proto::OpDesc grad = OpRegistry::Global().Get("take_along_axis").grad_maker(Take(0))[0];
  auto scope = test::RunOp(grad, {{"x", FloatTensor({3, 2}, {0, 0, 0, 0, 0, 0})},
                                  {"index", Int64Tensor({3, 2}, {2, 0, -1, 0, 0, 1})},
                                  {"out@GRAD", FloatTensor({3, 2}, {1, 2, 3, 4, 5, 6})}});
  // Column 0 picks rows 2, 2, 0; column 1 rows 0, 0, 1.
  EXPECT_EQ(CompareTensors(scope->GetVar("x@GRAD")->Get(), FloatTensor({3, 2}, {5, 6, 0, 6, 4, 0}), 0, 0), "");
  std::mt19937 rng(31);
  const Tensor x = test::RandomTensor({3, 4, 2}, DataType::kFP64, rng);
  EXPECT_EQ(CheckGrad(Take(1), {{"x", x}, {"index", Int64Tensor({2, 5, 2}, {0, 3, -1, 2, 1, 1, 0, 0, 3, 2,  //
                                                                             -4, 1, 2, 2, 3, 0, 1, 1, 0, -2})}},
                      {"x"}, {"out"}),
            "");
}

TEST(TakeAlongAxisTest, BadInputsNameTheOpAndWhatWasExpected) {
  const Tensor x = FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6});
  auto error = [&](int64_t axis, const Tensor& index) { return ErrorOf([&] { Taken(axis, x, index); }); };
  std::string e = error(1, Int64Tensor({2, 1}, {0, 3}));
  EXPECT_NE(e.find("'take_along_axis': input Index: value 3 at position 1 (flat index into Index i64[2,1]) is outside "
                   "[-3, 3) (dim 1 of Input [2,3]; negative values count from the end)"),
            std::string::npos)
      << e;
  e = error(1, Int64Tensor({2, 1}, {-4, 0}));
  EXPECT_NE(e.find("value -4 at position 0"), std::string::npos) << e;
  e = error(1, Int64Tensor({2}, {0, 1}));
  EXPECT_NE(e.find("input Index: expected rank 2 (Input's), got [2]"), std::string::npos) << e;
  e = error(1, Int64Tensor({3, 1}, {0, 1, 2}));
  EXPECT_NE(e.find("input Index: dim 0 is 3, larger than Input's 2 (Input [2,3], Index [3,1]; only dim Axis = 1 may be)"),
            std::string::npos)
      << e;
  e = error(2, Int64Tensor({2, 1}, {0, 1}));
  EXPECT_NE(e.find("'take_along_axis': attribute Axis"), std::string::npos) << e;
  e = error(0, FloatTensor({1, 1}, {0}));
  EXPECT_NE(e.find("input Index: expected dtype i64 or i32, got f32"), std::string::npos) << e;
}

TEST(TakeAlongAxisJitTest, FrameworkKernelsRunInsideACluster) {
  EXPECT_EQ(OpRegistry::Global().Get("take_along_axis").jit, JitLowering::kFramework);
  test::LoweringCase c;
  c.name = "take_along_axis";
  const proto::OpDesc fwd = Take(1);
  c.ops = {fwd, OpRegistry::Global().Get("take_along_axis").grad_maker(fwd)[0]};
  c.inputs = {{"x", {3, 5}}, {"index", {3, 4}}, {"out@GRAD", {3, 4}}};
  c.dtypes = {{"index", DataType::kINT64}};
  c.given = {{"index", Int64Tensor({3, 4}, {0, 4, -1, 2, 1, 1, 3, 0, -5, 2, 2, 4})}};
  c.outputs = {"out", "x@GRAD"};
  const auto obj = test::CheckLoweringNumerics(c, 1e-6, 1e-6);
  ASSERT_EQ(obj->program.instructions.size(), 2u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name(), "take_along_axis") << obj->Listing();
}

}  // namespace
}  // namespace kiln
