// gather and one_hot: picked rows for both index shapes and dtypes, negative
// indices counting from the end, other axes, any element dtype, the gradient
// accumulating repeated indices (-1 and n-1 alike) and by finite differences, X as a no-need-buffer input of the grad, out-of-range
// indices and ids named with their position, and the other bad inputs.
#include <gtest/gtest.h>

#include <random>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::ErrorOf;
using test::Int64Tensor;
using test::RandomTensor;
using test::RunOp;
using test::TypedTensor;
using test::ValuesOf;

proto::OpDesc Gather(int64_t axis = 0) {
  return OpBuilder("gather").In("X", {"x"}).In("Index", {"index"}).Out("Out", {"out"}).Attr("axis", axis).Build();
}

proto::OpDesc GatherGrad(int64_t axis = 0, bool with_dout = true) {
  OpBuilder b("gather_grad");
  b.In("X", {"x"}).In("Index", {"index"}).Out("X@GRAD", {"dx"}).Attr("axis", axis);
  if (with_dout) b.In("Out@GRAD", {"dout"});
  return b.Build();
}

Tensor Gathered(const proto::OpDesc& op, const Tensor& x, const Tensor& index) {
  auto scope = RunOp(op, {{"x", x}, {"index", index}});
  Tensor t;
  t.CopyFrom(scope->GetVar("out")->Get());
  return t;
}

TEST(GatherTest, PicksRowsForBothIndexShapesAndDtypes) {
  const Tensor x = TypedTensor<float>({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  for (const Tensor& index : {Int64Tensor({3}, {3, 0, 3}), Int64Tensor({3, 1}, {3, 0, 3}),
                              TypedTensor<int32_t>({3}, {3, 0, 3}), TypedTensor<int32_t>({3, 1}, {3, 0, 3})}) {
    SCOPED_TRACE(index.ShapeString());
    const Tensor out = Gathered(Gather(), x, index);
    EXPECT_EQ(out.dims(), (Dims{3, 2}));
    EXPECT_EQ(ValuesOf<float>(out), (std::vector<float>{30, 31, 0, 1, 30, 31}));
  }
  // No index: an empty Out of X's row shape.
  EXPECT_EQ(Gathered(Gather(), x, Int64Tensor({0}, {})).dims(), (Dims{0, 2}));
}

// An index in [-n, -1] counts from the end of the axis (numpy.take, ONNX
// Gather): -1 is row n-1 and -n row 0.
TEST(GatherTest, NegativeIndicesCountFromTheEnd) {
  const Tensor x = TypedTensor<float>({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  for (const Tensor& index : {Int64Tensor({4}, {-1, 0, -4, -3}), TypedTensor<int32_t>({4, 1}, {-1, 0, -4, -3})}) {
    SCOPED_TRACE(index.ShapeString());
    EXPECT_EQ(ValuesOf<float>(Gathered(Gather(), x, index)), (std::vector<float>{30, 31, 0, 1, 0, 1, 10, 11}));
  }
  // Along axis 1 of [2, 3]: -1 is column 2.
  const Tensor y = TypedTensor<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(ValuesOf<int64_t>(Gathered(Gather(1), y, Int64Tensor({2}, {-1, -3}))), (std::vector<int64_t>{3, 1, 6, 4}));
}

TEST(GatherTest, AnyElementDtypeIsCopied) {
  const Tensor index = Int64Tensor({2}, {1, 1});
  EXPECT_EQ(ValuesOf<int64_t>(Gathered(Gather(), TypedTensor<int64_t>({2}, {-7, 1LL << 40}), index)),
            (std::vector<int64_t>{1LL << 40, 1LL << 40}));
  EXPECT_EQ(ValuesOf<bool>(Gathered(Gather(), TypedTensor<bool>({2, 1}, {false, true}), index)),
            (std::vector<bool>{true, true}));
  EXPECT_EQ(ValuesOf<double>(Gathered(Gather(), TypedTensor<double>({3}, {0.5, 1.5, 2.5}), index)),
            (std::vector<double>{1.5, 1.5}));
}

// X [2, 3, 4] gathered along axis 1 (and -2) and axis 2 (and -1).
TEST(GatherTest, OtherAxes) {
  std::vector<int32_t> v(24);
  for (int i = 0; i < 24; ++i) v[i] = i;
  const Tensor x = TypedTensor<int32_t>({2, 3, 4}, v);
  for (int64_t axis : {1, -2}) {
    const Tensor out = Gathered(Gather(axis), x, Int64Tensor({2}, {2, 0}));
    EXPECT_EQ(out.dims(), (Dims{2, 2, 4}));
    EXPECT_EQ(ValuesOf<int32_t>(out),
              (std::vector<int32_t>{8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15}));
  }
  for (int64_t axis : {2, -1}) {
    const Tensor out = Gathered(Gather(axis), x, Int64Tensor({3, 1}, {3, 3, 1}));
    EXPECT_EQ(out.dims(), (Dims{2, 3, 3}));
    EXPECT_EQ(ValuesOf<int32_t>(out), (std::vector<int32_t>{3, 3, 1, 7, 7, 5, 11, 11, 9, 15, 15, 13, 19, 19, 17, 23,
                                                             23, 21}));
  }
}

// Indices 2, -2, -4, 2 over 4 rows: row 2 gets three Out@GRAD rows (-2 is
// row 2), row 0 one (-4), rows 1 and 3 none.
TEST(GatherGradTest, RepeatedIndicesAccumulate) {
  std::mt19937 rng(3);
  const Tensor dout = RandomTensor({4, 3}, DataType::kFP64, rng);
  auto scope = RunOp(GatherGrad(), {{"x", RandomTensor({4, 3}, DataType::kFP64, rng)},
                                    {"index", TypedTensor<int32_t>({4, 1}, {2, -2, -4, 2})},
                                    {"dout", dout}});
  const std::vector<double> dx = ValuesOf<double>(scope->GetVar("dx")->Get());
  const std::vector<double> g = ValuesOf<double>(dout);
  for (int j = 0; j < 3; ++j) {
    EXPECT_DOUBLE_EQ(dx[2 * 3 + j], g[0 * 3 + j] + g[1 * 3 + j] + g[3 * 3 + j]);
    EXPECT_DOUBLE_EQ(dx[0 * 3 + j], g[2 * 3 + j]);
    EXPECT_EQ(dx[1 * 3 + j], 0.0);
    EXPECT_EQ(dx[3 * 3 + j], 0.0);
  }
}

TEST(GatherGradTest, MatchesFiniteDifferences) {
  std::mt19937 rng(4);
  const std::map<std::string, Tensor> rows = {{"x", RandomTensor({5, 3}, DataType::kFP64, rng)},
                                              {"index", Int64Tensor({7}, {4, 0, 4, 1, 4, 0, 2})}};
  EXPECT_EQ(CheckGrad(Gather(), rows, {"x"}, {"out"}), "");
  const std::map<std::string, Tensor> mid = {{"x", RandomTensor({2, 4, 3}, DataType::kFP64, rng)},
                                             {"index", TypedTensor<int32_t>({5, 1}, {3, 3, 0, 1, 3})}};
  EXPECT_EQ(CheckGrad(Gather(1), mid, {"x"}, {"out"}), "");
  EXPECT_EQ(CheckGrad(Gather(-1), {{"x", mid.at("x")}, {"index", Int64Tensor({2}, {2, 2})}}, {"x"}, {"out"}), "");
  EXPECT_EQ(CheckGrad(Gather(), {{"x", rows.at("x")}, {"index", Int64Tensor({4}, {-1, 4, -5, 1})}}, {"x"}, {"out"}),
            "");
}

// X is read for its dims only; without Out@GRAD, X@GRAD is zeros.
TEST(GatherGradTest, XIsANoNeedBufferInputAndNoOutGradGivesZeros) {
  const OpInfo& info = OpRegistry::Global().Get("gather_grad");
  EXPECT_EQ(info.no_need_buffer, std::vector<std::string>{"X"});
  EXPECT_EQ(OpRegistry::Global().Get("gather").no_grad_inputs, std::vector<std::string>{"Index"});
  Tensor x_meta;
  x_meta.ShareExternalData(nullptr, DataType::kFP32, {3, 2});
  const Tensor dout = TypedTensor<float>({2, 2}, {1, 2, 3, 4});
  auto scope = RunOp(GatherGrad(), {{"x", x_meta}, {"index", Int64Tensor({2}, {1, 1})}, {"dout", dout}});
  EXPECT_EQ(ValuesOf<float>(scope->GetVar("dx")->Get()), (std::vector<float>{0, 0, 4, 6, 0, 0}));
  scope = RunOp(GatherGrad(0, false), {{"x", x_meta}, {"index", Int64Tensor({1}, {2})}});
  EXPECT_EQ(ValuesOf<float>(scope->GetVar("dx")->Get()), (std::vector<float>{0, 0, 0, 0, 0, 0}));
}

TEST(GatherTest, BadInputsNameTheOpAndWhatWasExpected) {
  const Tensor x = TypedTensor<float>({5, 3}, std::vector<float>(15, 1.0f));
  auto error = [&](const proto::OpDesc& op, const Tensor& index) {
    return ErrorOf([&] { RunOp(op, {{"x", x}, {"index", index}}); });
  };
  EXPECT_NE(error(Gather(), Int64Tensor({4}, {0, 1, 4, 5}))
                .find("'gather': input Index: value 5 at position 3 is outside [-5, 5) (dim 0 of X f32[5,3]; "
                      "negative values count from the end)"),
            std::string::npos);
  EXPECT_NE(error(Gather(), TypedTensor<int32_t>({2, 1}, {-5, -6})).find("value -6 at position 1 is outside [-5, 5)"),
            std::string::npos);
  EXPECT_NE(error(Gather(1), Int64Tensor({1}, {3})).find("value 3 at position 0 is outside [-3, 3) (dim 1 of X"),
            std::string::npos);
  // The grad checks its indices too.
  EXPECT_NE(ErrorOf([&] {
              RunOp(GatherGrad(), {{"x", x}, {"index", Int64Tensor({1}, {9})}, {"dout", TypedTensor<float>({1, 3}, {1, 2, 3})}});
            }).find("'gather_grad': input Index: value 9 at position 0"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              RunOp(GatherGrad(), {{"x", x}, {"index", Int64Tensor({1}, {-6})}, {"dout", TypedTensor<float>({1, 3}, {1, 2, 3})}});
            }).find("'gather_grad': input Index: value -6 at position 0"),
            std::string::npos);
  EXPECT_NE(error(Gather(), TypedTensor<float>({2}, {0, 1})).find("input Index: expected dtype i64 or i32, got f32"),
            std::string::npos);
  EXPECT_NE(error(Gather(), Int64Tensor({2, 2}, {0, 1, 2, 3})).find("input Index: expected dims [K] or [K, 1], got [2,2]"),
            std::string::npos);
  EXPECT_NE(error(Gather(2), Int64Tensor({1}, {0})).find("'gather': attribute axis"), std::string::npos);
  EXPECT_EQ(OpRegistry::Global().Get("gather").jit, JitLowering::kFramework);
}

// ---- one_hot ------------------------------------------------------------------------

proto::OpDesc OneHot(int64_t depth, bool allow_out_of_range = false) {
  return OpBuilder("one_hot")
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("depth", depth)
      .Attr("allow_out_of_range", allow_out_of_range)
      .Build();
}

TEST(OneHotTest, RowsOfDepthWithAOneAtTheId) {
  auto scope = RunOp(OneHot(4), {{"x", Int64Tensor({3, 1}, {2, 0, 3})}});
  const Tensor& out = scope->GetVar("out")->Get();
  EXPECT_EQ(out.dtype(), DataType::kFP32);
  EXPECT_EQ(out.dims(), (Dims{3, 4}));
  EXPECT_EQ(ValuesOf<float>(out), (std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}));
  scope = RunOp(OneHot(2), {{"x", TypedTensor<int32_t>({2, 2, 1}, {1, 1, 0, 1})}});
  EXPECT_EQ(scope->GetVar("out")->Get().dims(), (Dims{2, 2, 2}));
  EXPECT_EQ(ValuesOf<float>(scope->GetVar("out")->Get()), (std::vector<float>{0, 1, 0, 1, 1, 0, 0, 1}));
}

TEST(OneHotTest, OutOfRangeIdsAreAnErrorOrARowOfZeros) {
  const Tensor x = Int64Tensor({4, 1}, {1, -1, 3, 5});
  EXPECT_NE(ErrorOf([&] { RunOp(OneHot(3), {{"x", x}}); })
                .find("'one_hot': input X: id -1 at position 1 (flat index into X i64[4,1]) is outside [0, 3)"),
            std::string::npos);
  auto scope = RunOp(OneHot(4, true), {{"x", x}});
  EXPECT_EQ(ValuesOf<float>(scope->GetVar("out")->Get()),
            (std::vector<float>{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
}

TEST(OneHotTest, BadInputsNameTheOpAndWhatWasExpected) {
  auto error = [](const proto::OpDesc& op, const Tensor& x) { return ErrorOf([&] { RunOp(op, {{"x", x}}); }); };
  EXPECT_NE(error(OneHot(3), TypedTensor<float>({2, 1}, {0, 1})).find("input X: expected dtype i64 or i32, got f32"),
            std::string::npos);
  EXPECT_NE(error(OneHot(3), Int64Tensor({2}, {0, 1})).find("input X: expected dims [..., 1] (one id per row), got [2]"),
            std::string::npos);
  EXPECT_NE(error(OneHot(0), Int64Tensor({2, 1}, {0, 1})).find("attribute depth: expected a positive number"),
            std::string::npos);
  const proto::OpDesc no_depth = OpBuilder("one_hot").In("X", {"x"}).Out("Out", {"out"}).Build();
  EXPECT_NE(error(no_depth, Int64Tensor({1, 1}, {0})).find("depth"), std::string::npos);
  const OpInfo& info = OpRegistry::Global().Get("one_hot");
  EXPECT_FALSE(info.grad_maker);
  EXPECT_EQ(info.jit, JitLowering::kFramework);
}

}  // namespace
}  // namespace kiln
