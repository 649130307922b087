// clip, log_softmax, fused_softmax_mask_upper_triangle and their grads:
// values against direct computations (NaN, infinities and exact bounds for
// clip; large logits for log_softmax; garbage in the masked half for the
// causal softmax), gradients against finite differences on odd shapes, and
// the error messages of bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor Doubles(const Dims& dims, const std::vector<double>& v) {
  Tensor t(DataType::kFP64, dims);
  std::copy(v.begin(), v.end(), t.mutable_data<double>());
  return t;
}

// ---- clip ------------------------------------------------------------------------------

proto::OpDesc ClipOp(float lo, float hi, const std::string& out = "y") {
  return OpBuilder("clip").In("X", {"x"}).Out("Out", {out}).Attr("min", lo).Attr("max", hi).Build();
}
proto::OpDesc ClipGradOp(float lo, float hi) {
  return OpBuilder("clip_grad")
      .In("X", {"x"})
      .In("Out@GRAD", {"dy"})
      .Out("X@GRAD", {"dx"})
      .Attr("min", lo)
      .Attr("max", hi)
      .Build();
}

TEST(ClipOpTest, ValuesWithNaNInfinitiesAndBounds) {
  const std::vector<double> x = {-3, -1, -0.5, 0, 1.5, 2, kNaN, kInf, -kInf, 1.4999};
  const std::vector<double> want = {-1, -1, -0.5, 0, 1.5, 1.5, kNaN, 1.5, -1, 1.4999};
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const Tensor xt = test::CastTo(Doubles({10}, x), dtype);
    const Tensor y = RunOp(ClipOp(-1, 1.5f), {{"x", xt}})->GetVar("y")->Get();
    ASSERT_EQ(y.dtype(), dtype);
    EXPECT_EQ(CompareTensors(y, test::CastTo(Doubles({10}, want), dtype), 0, 0), "");
    // In place: X's buffer becomes Out.
    const Tensor z = RunOp(ClipOp(-1, 1.5f, "x"), {{"x", xt}})->GetVar("x")->Get();
    EXPECT_EQ(CompareTensors(z, test::CastTo(Doubles({10}, want), dtype), 0, 0), "");
  }
}

TEST(ClipOpTest, GradPassesStrictlyInsideTheBounds) {
  // x == min and x == max get no gradient (as Paddle's clip_grad); NaN x neither.
  const std::vector<double> x = {-3, -1, -0.999, 0, 1.499, 1.5, 2, kNaN, kInf, -kInf};
  const std::vector<double> want = {0, 0, 3, 4, 5, 0, 0, 0, 0, 0};
  const std::vector<double> dy = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    auto scope = RunOp(ClipGradOp(-1, 1.5f),
                       {{"x", test::CastTo(Doubles({10}, x), dtype)}, {"dy", test::CastTo(Doubles({10}, dy), dtype)}});
    EXPECT_EQ(CompareTensors(scope->GetVar("dx")->Get(), test::CastTo(Doubles({10}, want), dtype), 0, 0), "");
  }
  // min == max: constant output, no gradient anywhere.
  auto scope = RunOp(ClipGradOp(0.5f, 0.5f), {{"x", Doubles({3}, {0.4, 0.5, 0.6})}, {"dy", Doubles({3}, {1, 1, 1})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("dx")->Get(), Doubles({3}, {0, 0, 0}), 0, 0), "");
}

TEST(ClipOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(11);
  for (const Dims& dims : {Dims{1}, Dims{17}, Dims{3, 7}, Dims{2, 3, 5}}) {
    Tensor x = RandomTensor(dims, DataType::kFP64, rng, -3, 3);
    // Keep points off the kinks at the bounds, where the difference quotient jumps.
    double* p = x.mutable_data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (std::fabs(p[i] + 1) < 1e-3 || std::fabs(p[i] - 1.5) < 1e-3) p[i] += 0.01;
    }
    EXPECT_EQ(CheckGrad(ClipOp(-1, 1.5f), {{"x", x}}, {"x"}, {"y"}), "") << DimsToString(dims);
  }
}

TEST(ClipOpTest, Errors) {
  const Tensor x = Doubles({3}, {1, 2, 3});
  std::string msg = ErrorOf([&] { RunOp(ClipOp(2, 1), {{"x", x}}); });
  EXPECT_NE(msg.find("attributes 'min' (2) and 'max' (1): expected min <= max"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(ClipGradOp(2, 1), {{"x", x}, {"dy", x}}); });
  EXPECT_NE(msg.find("expected min <= max"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(ClipOp(std::nanf(""), 1), {{"x", x}}); });
  EXPECT_NE(msg.find("expected min <= max"), std::string::npos) << msg;
  msg = ErrorOf([&] {
    RunOp(OpBuilder("clip").In("X", {"x"}).Out("Out", {"y"}).Attr("max", 1.0f).Build(), {{"x", x}});
  });
  EXPECT_NE(msg.find("min"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(ClipOp(0, 1), {{"x", test::Int64Tensor({2}, {1, 2})}}); });
  EXPECT_NE(msg.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(ClipGradOp(0, 1), {{"x", x}, {"dy", Doubles({2}, {1, 2})}}); });
  EXPECT_NE(msg.find("input Out@GRAD: expected dims [3] (as X), got [2]"), std::string::npos) << msg;
}

TEST(ClipOpTest, IsElementwiseForTheJit) {
  for (const char* type : {"clip", "clip_grad"}) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_EQ(info.jit, JitLowering::kElementwise) << type;
    EXPECT_TRUE(static_cast<bool>(info.elementwise)) << type;
  }
}

// ---- log_softmax -------------------------------------------------------------------------

proto::OpDesc LogSoftmaxOp(int64_t axis, const std::string& out = "y") {
  return OpBuilder("log_softmax").In("X", {"x"}).Out("Out", {out}).Attr("axis", axis).Build();
}

// log_softmax from the definition, in long double: x_a - log(sum_b exp(x_b)),
// with the max shifted out so exp does not overflow.
Tensor NaiveLogSoftmax(const Tensor& x, int64_t axis) {
  int64_t outer = 1, d = x.dim(axis), inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= x.dim(k);
  for (size_t k = axis + 1; k < x.rank(); ++k) inner *= x.dim(k);
  Tensor out(DataType::kFP64, x.dims());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t a) { return (o * d + a) * inner + i; };
      long double m = -INFINITY, sum = 0;
      for (int64_t a = 0; a < d; ++a) m = std::max<long double>(m, ValueAt(x, at(a)));
      for (int64_t a = 0; a < d; ++a) sum += std::exp(ValueAt(x, at(a)) - m);
      for (int64_t a = 0; a < d; ++a) out.mutable_data<double>()[at(a)] = ValueAt(x, at(a)) - m - std::log(sum);
    }
  }
  return out;
}

TEST(LogSoftmaxOpTest, MatchesDefinitionFp32AndFp64) {
  std::mt19937 rng(12);
  const std::vector<std::pair<Dims, int64_t>> cases = {{{1, 1}, -1}, {{7, 17}, -1}, {{2, 33, 5}, 1},
                                                       {{3, 7}, 0},  {{33}, -1},    {{2, 3, 17}, -2}};
  for (const auto& [dims, axis] : cases) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      const Tensor x = RandomTensor(dims, dtype, rng, -5, 5);
      const Tensor y = RunOp(LogSoftmaxOp(axis), {{"x", x}})->GetVar("y")->Get();
      const double tol = dtype == DataType::kFP32 ? 2e-6 : 1e-14;
      const int64_t a = axis < 0 ? axis + static_cast<int64_t>(dims.size()) : axis;
      EXPECT_EQ(CompareTensors(y, NaiveLogSoftmax(x, a), tol, tol), "") << DimsToString(dims) << " axis " << axis;
    }
  }
}

// log(softmax) would give log(0) = -inf for the -1000 entry in float; the
// stable form gives -1000 exactly, and no overflow for large logits.
TEST(LogSoftmaxOpTest, IsStableWhereLogOfSoftmaxIsNot) {
  const Tensor x = test::FloatTensor({3, 2}, {-1000, 0, 1000, 1001, 88, 89});
  const Tensor y = RunOp(LogSoftmaxOp(-1), {{"x", x}})->GetVar("y")->Get();
  EXPECT_EQ(CompareTensors(y, NaiveLogSoftmax(x, 1), 1e-6, 1e-6), "");
  EXPECT_FLOAT_EQ(y.data<float>()[0], -1000.0f);
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(std::isfinite(y.data<float>()[i])) << i;
  // In place.
  const Tensor z = RunOp(LogSoftmaxOp(-1, "x"), {{"x", x}})->GetVar("x")->Get();
  EXPECT_EQ(CompareTensors(z, y, 0, 0), "");
}

TEST(LogSoftmaxOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(13);
  const std::vector<std::pair<Dims, int64_t>> cases = {{{1, 1}, -1}, {{7, 5}, -1}, {{2, 7, 3}, 1}, {{3, 4}, 0}};
  for (const auto& [dims, axis] : cases) {
    EXPECT_EQ(CheckGrad(LogSoftmaxOp(axis), {{"x", RandomTensor(dims, DataType::kFP64, rng, -3, 3)}}, {"x"}, {"y"}), "")
        << DimsToString(dims) << " axis " << axis;
  }
}

TEST(LogSoftmaxOpTest, GradFormulaAndInPlace) {
  const Tensor y = NaiveLogSoftmax(Doubles({2, 3}, {0.1, -2, 3, 1, 1, 1}), 1);
  const Tensor dy = Doubles({2, 3}, {1, -2, 0.5, 0, 3, 1});
  auto op = [](const std::string& dx) {
    return OpBuilder("log_softmax_grad").In("Out", {"y"}).In("Out@GRAD", {"dy"}).Out("X@GRAD", {dx}).Build();
  };
  Tensor want(DataType::kFP64, {2, 3});
  for (int64_t r = 0; r < 2; ++r) {
    double sum = 0;
    for (int64_t a = 0; a < 3; ++a) sum += ValueAt(dy, r * 3 + a);
    for (int64_t a = 0; a < 3; ++a) {
      want.mutable_data<double>()[r * 3 + a] = ValueAt(dy, r * 3 + a) - std::exp(ValueAt(y, r * 3 + a)) * sum;
    }
  }
  EXPECT_EQ(CompareTensors(RunOp(op("dx"), {{"y", y}, {"dy", dy}})->GetVar("dx")->Get(), want, 1e-14, 1e-14), "");
  EXPECT_EQ(CompareTensors(RunOp(op("dy"), {{"y", y}, {"dy", dy}})->GetVar("dy")->Get(), want, 1e-14, 1e-14), "");
}

TEST(LogSoftmaxOpTest, Errors) {
  const Tensor x = Doubles({2, 3}, {1, 2, 3, 4, 5, 6});
  std::string msg = ErrorOf([&] { RunOp(LogSoftmaxOp(2), {{"x", x}}); });
  EXPECT_NE(msg.find("axis 2 is out of range for rank 2"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(LogSoftmaxOp(-1), {{"x", test::Int64Tensor({2}, {1, 2})}}); });
  EXPECT_NE(msg.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << msg;
  msg = ErrorOf([&] {
    RunOp(OpBuilder("log_softmax_grad").In("Out", {"y"}).In("Out@GRAD", {"dy"}).Out("X@GRAD", {"dx"}).Build(),
          {{"y", x}, {"dy", Doubles({3, 2}, {1, 2, 3, 4, 5, 6})}});
  });
  EXPECT_NE(msg.find("input Out@GRAD: expected dims [2,3] (as Out), got [3,2]"), std::string::npos) << msg;
}

// ---- fused_softmax_mask_upper_triangle ------------------------------------------------------

proto::OpDesc CausalOp(const std::string& out = "y") {
  return OpBuilder("fused_softmax_mask_upper_triangle").In("X", {"x"}).Out("Out", {out}).Build();
}

// Row i of each [S, S] matrix: softmax of its entries j <= i (long double),
// 0 for j > i.
Tensor NaiveCausal(const Tensor& x) {
  const int64_t s = x.dims().back();
  Tensor out(DataType::kFP64, x.dims());
  for (int64_t r = 0; r < x.numel() / s; ++r) {
    const int64_t i = r % s;
    long double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= i; ++j) m = std::max<long double>(m, ValueAt(x, r * s + j));
    for (int64_t j = 0; j <= i; ++j) sum += std::exp(ValueAt(x, r * s + j) - m);
    for (int64_t j = 0; j < s; ++j) {
      out.mutable_data<double>()[r * s + j] =
          j <= i ? static_cast<double>(std::exp(ValueAt(x, r * s + j) - m) / sum) : 0;
    }
  }
  return out;
}

TEST(CausalSoftmaxOpTest, MatchesMaskedSoftmaxFp32AndFp64) {
  std::mt19937 rng(14);
  for (const Dims& dims : {Dims{1, 1}, Dims{5, 5}, Dims{2, 3, 7, 7}, Dims{17, 17}, Dims{3, 1, 1}}) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      const Tensor x = RandomTensor(dims, dtype, rng, -5, 5);
      const Tensor y = RunOp(CausalOp(), {{"x", x}})->GetVar("y")->Get();
      const double tol = dtype == DataType::kFP32 ? 1e-6 : 1e-14;
      EXPECT_EQ(CompareTensors(y, NaiveCausal(x), tol, tol), "") << DimsToString(dims);
    }
  }
}

// The masked half is never read: +inf, NaN or huge values there change
// nothing, and no NaN appears (an added -inf mask would give inf - inf).
// Row 0 is [1, 0, ..., 0].
TEST(CausalSoftmaxOpTest, MaskedEntriesAreNeverRead) {
  std::mt19937 rng(15);
  const int64_t s = 9;
  Tensor x = RandomTensor({2, s, s}, DataType::kFP32, rng, -3, 3);
  const Tensor clean = RunOp(CausalOp(), {{"x", x}})->GetVar("y")->Get();
  float* p = x.mutable_data<float>();
  const float garbage[] = {INFINITY, NAN, 1e30f, -INFINITY};
  for (int64_t r = 0; r < 2 * s; ++r) {
    for (int64_t j = r % s + 1; j < s; ++j) p[r * s + j] = garbage[(r + j) % 4];
  }
  const Tensor y = RunOp(CausalOp(), {{"x", x}})->GetVar("y")->Get();
  EXPECT_EQ(CompareTensors(y, clean, 0, 0), "");
  for (int64_t j = 0; j < s; ++j) EXPECT_EQ(y.data<float>()[j], j == 0 ? 1.0f : 0.0f) << j;
  // Large logits do not overflow.
  const Tensor big = test::FloatTensor({2, 2}, {1000, -5, 1000, 1001});
  EXPECT_EQ(CompareTensors(RunOp(CausalOp(), {{"x", big}})->GetVar("y")->Get(), NaiveCausal(big), 1e-6, 1e-6), "");
}

TEST(CausalSoftmaxOpTest, GradMatchesFiniteDifferencesAndMaskedEntriesGetZero) {
  std::mt19937 rng(16);
  for (const Dims& dims : {Dims{1, 1}, Dims{5, 5}, Dims{2, 1, 7, 7}, Dims{3, 3}}) {
    EXPECT_EQ(CheckGrad(CausalOp(), {{"x", RandomTensor(dims, DataType::kFP64, rng, -3, 3)}}, {"x"}, {"y"}), "")
        << DimsToString(dims);
  }
  const int64_t s = 6;
  const Tensor y = NaiveCausal(RandomTensor({s, s}, DataType::kFP64, rng));
  const proto::OpDesc g = OpBuilder("fused_softmax_mask_upper_triangle_grad")
                              .In("Out", {"y"})
                              .In("Out@GRAD", {"dy"})
                              .Out("X@GRAD", {"dx"})
                              .Build();
  const Tensor dx = RunOp(g, {{"y", y}, {"dy", RandomTensor({s, s}, DataType::kFP64, rng)}})->GetVar("dx")->Get();
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = i + 1; j < s; ++j) EXPECT_EQ(ValueAt(dx, i * s + j), 0.0) << i << "," << j;
  }
}

TEST(CausalSoftmaxOpTest, RunsInPlace) {
  std::mt19937 rng(17);
  const Tensor x = RandomTensor({2, 5, 5}, DataType::kFP32, rng);
  const Tensor y = RunOp(CausalOp("x"), {{"x", x}})->GetVar("x")->Get();
  EXPECT_EQ(CompareTensors(y, NaiveCausal(x), 1e-6, 1e-6), "");
}

TEST(CausalSoftmaxOpTest, Errors) {
  std::mt19937 rng(18);
  std::string msg = ErrorOf([&] { RunOp(CausalOp(), {{"x", RandomTensor({3, 4}, DataType::kFP32, rng)}}); });
  EXPECT_NE(msg.find("input X: expected dims [..., S, S] (the last two equal), got [3,4]"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(CausalOp(), {{"x", RandomTensor({4}, DataType::kFP32, rng)}}); });
  EXPECT_NE(msg.find("input X: expected dims [..., S, S] (the last two equal), got [4]"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(CausalOp(), {{"x", test::Int64Tensor({1, 1}, {1})}}); });
  EXPECT_NE(msg.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << msg;
  // Build time: unknown dims pass, a known mismatch fails.
  proto::BlockDesc block;
  proto::VarDesc* v = block.add_vars();
  v->set_name("x");
  for (int64_t d : {-1, 4, -1}) v->add_dims(d);
  *block.add_ops() = CausalOp();
  InferShapeAtBuild(&block, 0, /*declare_outputs=*/true);
  EXPECT_EQ(VarDims(*FindVarDesc(block, "y")), (Dims{-1, 4, -1}));
}

TEST(CausalSoftmaxOpTest, JitKinds) {
  EXPECT_EQ(OpRegistry::Global().Get("log_softmax").jit, JitLowering::kOneDnn);
  EXPECT_EQ(OpRegistry::Global().Get("log_softmax_grad").jit, JitLowering::kOneDnn);
  EXPECT_EQ(OpRegistry::Global().Get("fused_softmax_mask_upper_triangle").jit, JitLowering::kFramework);
  EXPECT_EQ(OpRegistry::Global().Get("fused_softmax_mask_upper_triangle_grad").jit, JitLowering::kFramework);
}

}  // namespace
}  // namespace kiln
