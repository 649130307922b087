// reduce_max and reduce_min: hand-computed values, every dim subset against a
// direct computation in every dtype, NaN and infinities, the gradient by
// finite differences, ties sharing Out@GRAD, and error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <type_traits>

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

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

proto::OpDesc Reduce(const std::string& type, const std::vector<int64_t>& dim, bool keep_dim = false,
                     bool reduce_all = false) {
  return OpBuilder(type)
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("dim", dim)
      .Attr("keep_dim", keep_dim)
      .Attr("reduce_all", reduce_all)
      .Build();
}

proto::OpDesc ReduceGrad(const std::string& type, const std::vector<int64_t>& dim, bool keep_dim = false) {
  return OpBuilder(type + "_grad")
      .In("X", {"x"})
      .In("Out", {"out"})
      .In("Out@GRAD", {"dout"})
      .Out("X@GRAD", {"dx"})
      .Attr("dim", dim)
      .Attr("keep_dim", keep_dim)
      .Build();
}

template <typename T>
std::vector<T> Reduced(const proto::OpDesc& op, const Tensor& x, Dims* dims = nullptr) {
  auto scope = RunOp(op, {{"x", x}});
  const Tensor& out = scope->GetVar("out")->Get();
  if (dims != nullptr) *dims = out.dims();
  return ValuesOf<T>(out);
}

TEST(ReduceMaxMinTest, HandComputedValuesAndShapes) {
  const Tensor x = TypedTensor<double>({2, 3}, {1, 5, -2, 4, 0, 7});
  Dims dims;
  EXPECT_EQ(Reduced<double>(Reduce("reduce_max", {1}), x, &dims), (std::vector<double>{5, 7}));
  EXPECT_EQ(dims, (Dims{2}));
  EXPECT_EQ(Reduced<double>(Reduce("reduce_min", {-1}), x, &dims), (std::vector<double>{-2, 0}));
  EXPECT_EQ(Reduced<double>(Reduce("reduce_max", {0}, true), x, &dims), (std::vector<double>{4, 5, 7}));
  EXPECT_EQ(dims, (Dims{1, 3}));
  EXPECT_EQ(Reduced<double>(Reduce("reduce_min", {0}, false, true), x, &dims), (std::vector<double>{-2}));
  EXPECT_EQ(dims, (Dims{1}));
  EXPECT_EQ(Reduced<double>(Reduce("reduce_max", {}, true), x, &dims), (std::vector<double>{7}));
  EXPECT_EQ(dims, (Dims{1, 1}));
  // The default dim is [0].
  auto scope = RunOp(OpBuilder("reduce_min").In("X", {"x"}).Out("Out", {"out"}).Build(), {{"x", x}});
  EXPECT_EQ(ValuesOf<double>(scope->GetVar("out")->Get()), (std::vector<double>{1, 0, -2}));
}

// Every subset of the dims of a [3, 4, 5] tensor, keep_dim both ways, every
// dtype, against a loop over all coordinates.
template <typename T>
void CheckAgainstDirect(bool max) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pick(-50, 50);
  const Dims xd = {3, 4, 5};
  std::vector<T> v(60);
  for (auto& e : v) e = static_cast<T>(pick(rng)) / static_cast<T>(std::is_integral_v<T> ? 1 : 4);
  const Tensor x = TypedTensor<T>(xd, v);
  for (int mask = 1; mask < 8; ++mask) {
    std::vector<int64_t> dim;
    for (int d = 0; d < 3; ++d) {
      if (mask & (1 << d)) dim.push_back(d);
    }
    Dims kept = xd;
    for (int64_t d : dim) kept[d] = 1;
    std::vector<T> want(static_cast<size_t>(Numel(kept)), max ? std::numeric_limits<T>::lowest()
                                                               : std::numeric_limits<T>::max());
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        for (int64_t k = 0; k < 5; ++k) {
          const int64_t o = ((kept[1] == 1 ? 0 : j) + (kept[0] == 1 ? 0 : i) * kept[1]) * kept[2] +
                            (kept[2] == 1 ? 0 : k);
          const T e = v[(i * 4 + j) * 5 + k];
          want[o] = max ? std::max(want[o], e) : std::min(want[o], e);
        }
      }
    }
    for (bool keep : {false, true}) {
      SCOPED_TRACE("mask " + std::to_string(mask) + (keep ? " keep_dim" : ""));
      Dims dims;
      EXPECT_EQ(Reduced<T>(Reduce(max ? "reduce_max" : "reduce_min", dim, keep), x, &dims), want);
      EXPECT_EQ(Numel(dims), Numel(kept));
      EXPECT_EQ(dims.size(), keep ? 3u : std::max<size_t>(1, 3 - dim.size()));
    }
  }
}

TEST(ReduceMaxMinTest, EveryDimSubsetInEveryDtypeMatchesADirectLoop) {
  for (bool max : {true, false}) {
    CheckAgainstDirect<float>(max);
    CheckAgainstDirect<double>(max);
    CheckAgainstDirect<int64_t>(max);
    CheckAgainstDirect<int32_t>(max);
  }
}

TEST(ReduceMaxMinTest, NanPropagatesAndInfinitiesAreValues) {
  const Tensor x = TypedTensor<float>({4, 3}, {1, NAN, 3, -INFINITY, -INFINITY, -INFINITY, NAN, NAN, 2,
                                               INFINITY, 0, 5});
  for (const char* type : {"reduce_max", "reduce_min"}) {
    SCOPED_TRACE(type);
    const std::vector<float> out = Reduced<float>(Reduce(type, {1}), x);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], -INFINITY);
    EXPECT_TRUE(std::isnan(out[2]));
    EXPECT_EQ(out[3], std::string(type) == "reduce_max" ? INFINITY : 0.0f);
  }
  const std::vector<int64_t> ints = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  EXPECT_EQ(Reduced<int64_t>(Reduce("reduce_max", {0}), TypedTensor<int64_t>({2}, ints)), (std::vector<int64_t>{ints[1]}));
  EXPECT_EQ(Reduced<int64_t>(Reduce("reduce_min", {0}), TypedTensor<int64_t>({2}, ints)), (std::vector<int64_t>{ints[0]}));
}

TEST(ReduceMaxMinGradTest, MatchesFiniteDifferences) {
  std::mt19937 rng(6);
  // Continuous random values: no ties, so the reduction is differentiable.
  const std::map<std::string, Tensor> in = {{"x", RandomTensor({3, 4, 5}, DataType::kFP64, rng)}};
  for (const char* type : {"reduce_max", "reduce_min"}) {
    for (const auto& dim : std::vector<std::vector<int64_t>>{{0}, {1}, {-1}, {0, 2}, {}}) {
      for (bool keep : {false, true}) {
        SCOPED_TRACE(std::string(type) + " dims " + std::to_string(dim.size()) + (keep ? " keep" : ""));
        EXPECT_EQ(CheckGrad(Reduce(type, dim, keep), in, {"x"}, {"out"}, {1e-6, 1e-6, 1e-5, 60}), "");
      }
    }
  }
}

// Ties share Out@GRAD equally (torch.amax); a NaN result sends it to the NaNs.
TEST(ReduceMaxMinGradTest, TiesShareTheGradientEqually) {
  const Tensor x = TypedTensor<double>({3, 4}, {1, 3, 3, 2, 5, 5, 5, 0, 1, kNan, kNan, 9});
  const Tensor dout = TypedTensor<double>({3}, {6, 9, 4});
  for (const char* type : {"reduce_max", "reduce_min"}) {
    SCOPED_TRACE(type);
    auto fwd = RunOp(Reduce(type, {1}), {{"x", x}});
    auto scope = RunOp(ReduceGrad(type, {1}), {{"x", x}, {"out", fwd->GetVar("out")->Get()}, {"dout", dout}});
    const std::vector<double> dx = ValuesOf<double>(scope->GetVar("dx")->Get());
    const std::vector<double> want = std::string(type) == "reduce_max"
                                         ? std::vector<double>{0, 3, 3, 0, 3, 3, 3, 0, 0, 2, 2, 0}
                                         : std::vector<double>{6, 0, 0, 0, 0, 0, 0, 9, 0, 2, 2, 0};
    EXPECT_EQ(dx, want);
  }
}

TEST(ReduceMaxMinGradTest, AbsentOutGradGivesZeros) {
  const Tensor x = TypedTensor<float>({2, 2}, {1, 2, 3, 4});
  proto::OpDesc g = ReduceGrad("reduce_max", {0});
  g.mutable_inputs()->RemoveLast();  // Out@GRAD
  auto scope = RunOp(g, {{"x", x}, {"out", TypedTensor<float>({2}, {3, 4})}});
  EXPECT_EQ(ValuesOf<float>(scope->GetVar("dx")->Get()), (std::vector<float>{0, 0, 0, 0}));
}

TEST(ReduceMaxMinTest, BadInputsNameTheOpAndWhatWasExpected) {
  auto error = [](const proto::OpDesc& op, const Tensor& x) { return ErrorOf([&] { RunOp(op, {{"x", x}}); }); };
  const Tensor f = TypedTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_NE(error(Reduce("reduce_max", {0}), TypedTensor<bool>({2}, {true, false}))
                .find("'reduce_max': input X: expected dtype f32, f64, i64 or i32, got bool"),
            std::string::npos);
  EXPECT_NE(error(Reduce("reduce_min", {2}), f).find("attribute dim"), std::string::npos);
  EXPECT_NE(error(Reduce("reduce_min", {1, -1}), f).find("attribute dim names dim 1 twice"), std::string::npos);
  EXPECT_NE(error(Reduce("reduce_max", {1}), TypedTensor<float>({2, 0}, {}))
                .find("input X: reduced dim 1 has size 0 (X is f32[2,0])"),
            std::string::npos);
  // The gradient is for floats only, and Out must be X reduced.
  const Tensor i = TypedTensor<int32_t>({2}, {1, 2});
  EXPECT_NE(ErrorOf([&] { RunOp(ReduceGrad("reduce_max", {0}), {{"x", i}, {"out", i}, {"dout", i}}); })
                .find("'reduce_max_grad': input X: expected dtype f32 or f64, got i32"),
            std::string::npos);
  const Tensor wrong = TypedTensor<float>({3}, {1, 2, 3});
  EXPECT_NE(ErrorOf([&] { RunOp(ReduceGrad("reduce_max", {1}), {{"x", f}, {"out", wrong}, {"dout", wrong}}); })
                .find("input Out: expected dims [2] (as X reduced), got [3]"),
            std::string::npos);
}

TEST(ReduceMaxMinTest, RegistryEntries) {
  for (const char* type : {"reduce_max", "reduce_min"}) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_TRUE(info.grad_maker);
    EXPECT_EQ(info.jit, JitLowering::kFramework);
    EXPECT_EQ(OpRegistry::Global().Get(std::string(type) + "_grad").jit, JitLowering::kFramework);
    const auto grads = info.grad_maker(Reduce(type, {1}));
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_EQ(InputArgs(grads[0], "Out"), std::vector<std::string>{"out"});  // the grad reads the result
  }
}

}  // namespace
}  // namespace kiln
