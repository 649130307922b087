// The comparisons and where: every comparison against its C++ operator over
// values with NaN and infinities, broadcasting as the elementwise ops do,
// every dtype, where's forward and gradient (by hand and by finite
// differences), X and Y as no-need-buffer inputs of the grad, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::ErrorOf;
using test::RandomTensor;
using test::RunOp;
using test::TypedTensor;
using test::ValuesOf;

proto::OpDesc Compare(const std::string& type, int64_t axis = -1) {
  return OpBuilder(type).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", axis).Build();
}

std::vector<bool> Compared(const proto::OpDesc& op, const Tensor& x, const Tensor& y, Dims* dims = nullptr) {
  auto scope = RunOp(op, {{"x", x}, {"y", y}});
  const Tensor& out = scope->GetVar("out")->Get();
  EXPECT_EQ(out.dtype(), DataType::kBOOL);
  if (dims != nullptr) *dims = out.dims();
  return ValuesOf<bool>(out);
}

const std::vector<std::pair<std::string, std::function<bool(double, double)>>>& Comparisons() {
  static const auto* all = new std::vector<std::pair<std::string, std::function<bool(double, double)>>>{
      {"less_than", [](double a, double b) { return a < b; }},
      {"less_equal", [](double a, double b) { return a <= b; }},
      {"greater_than", [](double a, double b) { return a > b; }},
      {"greater_equal", [](double a, double b) { return a >= b; }},
      {"equal", [](double a, double b) { return a == b; }},
      {"not_equal", [](double a, double b) { return a != b; }}};
  return *all;
}

// Every ordered pair of a few values, NaN and infinities among them: IEEE
// comparisons (all false with a NaN, except not_equal).
TEST(CompareTest, EveryComparisonMatchesIeeeOnAllPairs) {
  const std::vector<double> values = {-INFINITY, -1.5, 0, 2, INFINITY, NAN};
  std::vector<double> xs, ys;
  for (double a : values) {
    for (double b : values) {
      xs.push_back(a);
      ys.push_back(b);
    }
  }
  const Dims dims = {static_cast<int64_t>(xs.size())};
  for (const auto& [type, fn] : Comparisons()) {
    SCOPED_TRACE(type);
    const std::vector<float> xf(xs.begin(), xs.end()), yf(ys.begin(), ys.end());
    const std::vector<bool> f32 = Compared(Compare(type), TypedTensor<float>(dims, xf), TypedTensor<float>(dims, yf));
    const std::vector<bool> f64 = Compared(Compare(type), TypedTensor<double>(dims, xs), TypedTensor<double>(dims, ys));
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(f32[i], fn(xs[i], ys[i])) << xs[i] << " vs " << ys[i];
      EXPECT_EQ(f64[i], fn(xs[i], ys[i])) << xs[i] << " vs " << ys[i];
    }
  }
}

TEST(CompareTest, IntegerAndBoolDtypes) {
  const std::vector<int64_t> a = {-5, 3, 3, 1LL << 40}, b = {-6, 3, 4, (1LL << 40) + 1};
  const std::vector<int32_t> a32(a.begin(), a.begin() + 3), b32(b.begin(), b.begin() + 3);
  const Tensor ba = TypedTensor<bool>({4}, {false, false, true, true}), bb = TypedTensor<bool>({4}, {false, true, false, true});
  for (const auto& [type, fn] : Comparisons()) {
    SCOPED_TRACE(type);
    const std::vector<bool> i64 = Compared(Compare(type), TypedTensor<int64_t>({4}, a), TypedTensor<int64_t>({4}, b));
    const std::vector<bool> i32 = Compared(Compare(type), TypedTensor<int32_t>({3}, a32), TypedTensor<int32_t>({3}, b32));
    const std::vector<bool> bools = Compared(Compare(type), ba, bb);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(i64[i], fn(static_cast<double>(a[i]), static_cast<double>(b[i]))) << i;
      if (i < 3) {
        EXPECT_EQ(i32[i], fn(a32[i], b32[i])) << i;
      }
      EXPECT_EQ(bools[i], fn(i >= 2, i % 2 == 1)) << i;  // false < true
    }
  }
}

// Y [3] into X [2, 3] (trailing dims), Y [2] on axis 0, Y [1, 3] with a size-1 dim.
TEST(CompareTest, YBroadcastsIntoXAsInTheElementwiseOps) {
  const Tensor x = TypedTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Dims dims;
  EXPECT_EQ(Compared(Compare("less_than"), x, TypedTensor<float>({3}, {2, 2, 5}), &dims),
            (std::vector<bool>{true, false, true, false, false, false}));
  EXPECT_EQ(dims, (Dims{2, 3}));
  EXPECT_EQ(Compared(Compare("greater_equal", 0), x, TypedTensor<float>({2}, {2, 5})),
            (std::vector<bool>{false, true, true, false, true, true}));
  EXPECT_EQ(Compared(Compare("equal"), x, TypedTensor<float>({1, 3}, {4, 2, 6})),
            (std::vector<bool>{false, true, false, true, false, true}));
}

TEST(CompareTest, BadInputsNameTheOpAndWhatWasExpected) {
  const Tensor x = TypedTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto error = [&](const proto::OpDesc& op, const Tensor& y) {
    return ErrorOf([&] { RunOp(op, {{"x", x}, {"y", y}}); });
  };
  EXPECT_NE(error(Compare("less_than"), TypedTensor<double>({3}, {1, 2, 3}))
                .find("'less_than': input Y: expected dtype f32 (as X), got f64"),
            std::string::npos);
  EXPECT_NE(error(Compare("equal"), TypedTensor<float>({2}, {1, 2})).find("'equal'"), std::string::npos);
  EXPECT_NE(error(Compare("not_equal", 2), TypedTensor<float>({3}, {1, 2, 3})).find("'not_equal'"),
            std::string::npos);
  for (const auto& [type, fn] : Comparisons()) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_FALSE(info.grad_maker) << type;
    EXPECT_EQ(info.jit, JitLowering::kFramework) << type;
  }
}

// ---- where ------------------------------------------------------------------------------

proto::OpDesc Where() {
  return OpBuilder("where").In("Condition", {"c"}).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Build();
}

proto::OpDesc WhereGrad(bool with_dout = true) {
  OpBuilder b("where_grad");
  b.In("Condition", {"c"}).In("X", {"x"}).In("Y", {"y"}).Out("X@GRAD", {"dx"}).Out("Y@GRAD", {"dy"});
  if (with_dout) b.In("Out@GRAD", {"dout"});
  return b.Build();
}

TEST(WhereTest, PicksXWhereTheConditionHoldsElseY) {
  const Tensor c = TypedTensor<bool>({2, 2}, {true, false, false, true});
  auto scope = RunOp(Where(), {{"c", c}, {"x", TypedTensor<float>({2, 2}, {1, 2, 3, 4})},
                               {"y", TypedTensor<float>({2, 2}, {-1, -2, NAN, -4})}});
  const std::vector<float> out = ValuesOf<float>(scope->GetVar("out")->Get());
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], -2);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 4);
  scope = RunOp(Where(), {{"c", c}, {"x", TypedTensor<int64_t>({2, 2}, {1, 2, 3, 4})},
                          {"y", TypedTensor<int64_t>({2, 2}, {5, 6, 7, 8})}});
  EXPECT_EQ(ValuesOf<int64_t>(scope->GetVar("out")->Get()), (std::vector<int64_t>{1, 6, 7, 4}));
}

TEST(WhereGradTest, SplitsOutGradByTheCondition) {
  const Tensor c = TypedTensor<bool>({3}, {true, false, true});
  Tensor meta;
  meta.ShareExternalData(nullptr, DataType::kFP64, {3});  // X and Y: dims only (no-need-buffer)
  auto scope = RunOp(WhereGrad(), {{"c", c}, {"x", meta}, {"y", meta}, {"dout", TypedTensor<double>({3}, {1, 2, 3})}});
  EXPECT_EQ(ValuesOf<double>(scope->GetVar("dx")->Get()), (std::vector<double>{1, 0, 3}));
  EXPECT_EQ(ValuesOf<double>(scope->GetVar("dy")->Get()), (std::vector<double>{0, 2, 0}));
  scope = RunOp(WhereGrad(false), {{"c", c}, {"x", meta}, {"y", meta}});
  EXPECT_EQ(ValuesOf<double>(scope->GetVar("dx")->Get()), (std::vector<double>{0, 0, 0}));
  const OpInfo& info = OpRegistry::Global().Get("where_grad");
  EXPECT_EQ(info.no_need_buffer, (std::vector<std::string>{"X", "Y"}));
  EXPECT_EQ(OpRegistry::Global().Get("where").no_grad_inputs, std::vector<std::string>{"Condition"});
}

TEST(WhereGradTest, MatchesFiniteDifferences) {
  std::mt19937 rng(5);
  std::bernoulli_distribution coin(0.5);
  std::vector<bool> c(24);
  for (size_t i = 0; i < c.size(); ++i) c[i] = coin(rng);
  const std::map<std::string, Tensor> in = {{"c", TypedTensor<bool>({2, 3, 4}, c)},
                                            {"x", RandomTensor({2, 3, 4}, DataType::kFP64, rng)},
                                            {"y", RandomTensor({2, 3, 4}, DataType::kFP64, rng)}};
  EXPECT_EQ(CheckGrad(Where(), in, {"x", "y"}, {"out"}), "");
}

TEST(WhereTest, BadInputsNameTheOpAndWhatWasExpected) {
  const Tensor c = TypedTensor<bool>({2}, {true, false});
  const Tensor x = TypedTensor<float>({2}, {1, 2});
  auto error = [](const Tensor& c, const Tensor& x, const Tensor& y) {
    return ErrorOf([&] { RunOp(Where(), {{"c", c}, {"x", x}, {"y", y}}); });
  };
  EXPECT_NE(error(x, x, x).find("'where': input Condition: expected dtype bool, got f32"), std::string::npos);
  EXPECT_NE(error(c, x, TypedTensor<float>({1}, {1})).find("input Y: expected dims [2] (as X; where does not "
                                                             "broadcast), got [1]"),
            std::string::npos);
  EXPECT_NE(error(TypedTensor<bool>({1, 2}, {true, true}), x, x).find("input Condition: expected dims [2]"),
            std::string::npos);
  EXPECT_NE(error(c, x, TypedTensor<int64_t>({2}, {1, 2})).find("input Y: expected dtype f32 (as X), got i64"),
            std::string::npos);
  const Tensor i = TypedTensor<int32_t>({2}, {1, 2});
  EXPECT_NE(ErrorOf([&] { RunOp(WhereGrad(), {{"c", c}, {"x", i}, {"y", i}, {"dout", i}}); })
                .find("'where_grad': input X: expected dtype f32 or f64, got i32"),
            std::string::npos);
  EXPECT_EQ(OpRegistry::Global().Get("where").jit, JitLowering::kFramework);
}

}  // namespace
}  // namespace kiln
