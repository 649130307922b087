// instance_norm: ONNX's example, values against per-group statistics
// computed here, absent Scale/Bias, SavedMean/SavedVariance, grads of X,
// Scale and Bias by finite differences, errors, and the framework kernels
// inside a cluster.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"
#include "tests/unary_op_test_util.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;

proto::OpDesc InstanceNorm(bool scale_bias = true, float epsilon = 1e-5f, bool saved = false) {
  OpBuilder b("instance_norm");
  b.In("X", {"x"}).Out("Y", {"y"}).Attr("epsilon", epsilon);
  if (scale_bias) b.In("Scale", {"s"}).In("Bias", {"b"});
  if (saved) b.Out("SavedMean", {"m"}).Out("SavedVariance", {"v"});
  return b.Build();
}

TEST(InstanceNormOpTest, OnnxExample) {
  const Tensor x = FloatTensor({1, 2, 1, 3}, {-1, 0, 1, 2, 3, 4});
  auto scope = test::RunOp(InstanceNorm(), {{"x", x}, {"s", FloatTensor({2}, {1, 1.5f})}, {"b", FloatTensor({2}, {0, 1})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("y")->Get(),
                           FloatTensor({1, 2, 1, 3}, {-1.22473537f, 0, 1.22473537f, -0.83710306f, 1, 2.83710306f}), 1e-6,
                           1e-6),
            "");
}

// Y against mean and variance computed here for each (n, c), with the
// saved statistics, in f32 and f64.
TEST(InstanceNormOpTest, MatchesPerGroupStatistics) {
  std::mt19937 rng(15);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const Tensor x = test::RandomTensor({2, 3, 4, 5}, dtype, rng, -3, 3);
    const Tensor s = test::RandomTensor({3}, dtype, rng), b = test::RandomTensor({3}, dtype, rng);
    auto scope = test::RunOp(InstanceNorm(true, 1e-3f, true), {{"x", x}, {"s", s}, {"b", b}});
    Tensor want(dtype, x.dims()), mean(dtype, {6}), inv(dtype, {6});
    for (int64_t g = 0; g < 6; ++g) {
      double m = 0, v = 0;
      for (int64_t k = 0; k < 20; ++k) m += test::ValueAt(x, g * 20 + k) / 20;
      for (int64_t k = 0; k < 20; ++k) v += std::pow(test::ValueAt(x, g * 20 + k) - m, 2) / 20;
      const double i = 1 / std::sqrt(v + double(1e-3f));
      auto set = [dtype](Tensor& t, int64_t at, double value) {
        if (dtype == DataType::kFP32) {
          t.mutable_data<float>()[at] = static_cast<float>(value);
        } else {
          t.mutable_data<double>()[at] = value;
        }
      };
      set(mean, g, m);
      set(inv, g, i);
      for (int64_t k = 0; k < 20; ++k) {
        set(want, g * 20 + k, (test::ValueAt(x, g * 20 + k) - m) * i * test::ValueAt(s, g % 3) + test::ValueAt(b, g % 3));
      }
    }
    const double tol = dtype == DataType::kFP32 ? 1e-5 : 1e-12;
    EXPECT_EQ(CompareTensors(scope->GetVar("y")->Get(), want, tol, tol), "");
    EXPECT_EQ(CompareTensors(scope->GetVar("m")->Get(), mean, tol, tol), "");
    EXPECT_EQ(CompareTensors(scope->GetVar("v")->Get(), inv, tol, tol), "");
  }
}

TEST(InstanceNormOpTest, WithoutScaleAndBiasAndAtRankTwo) {
  const Tensor x = FloatTensor({1, 2, 2}, {1, 3, 10, 10});
  // Scale 1, bias 0; a constant group normalises to 0.
  EXPECT_EQ(CompareTensors(test::RunAndGet(InstanceNorm(false), {{"x", x}}, "y"),
                           FloatTensor({1, 2, 2}, {-0.999995f, 0.999995f, 0, 0}), 1e-6, 0),
            "");
  // [N, C]: every group has one element, so Y is Bias.
  auto scope = test::RunOp(InstanceNorm(), {{"x", FloatTensor({2, 2}, {5, 6, 7, 8})},
                                            {"s", FloatTensor({2}, {2, 3})},
                                            {"b", FloatTensor({2}, {-1, 4})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("y")->Get(), FloatTensor({2, 2}, {-1, 4, -1, 4}), 0, 0), "");
}

TEST(InstanceNormOpTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(16);
  for (const Dims& dims : {Dims{2, 3, 4}, Dims{1, 2, 3, 3}, Dims{3, 1, 5}}) {
    const Tensor x = test::RandomTensor(dims, DataType::kFP64, rng, -2, 2);
    const Tensor s = test::RandomTensor({dims[1]}, DataType::kFP64, rng, 0.5, 1.5);
    const Tensor b = test::RandomTensor({dims[1]}, DataType::kFP64, rng);
    EXPECT_EQ(CheckGrad(InstanceNorm(), {{"x", x}, {"s", s}, {"b", b}}, {"x", "s", "b"}, {"y"}), "")
        << DimsToString(dims);
    EXPECT_EQ(CheckGrad(InstanceNorm(false), {{"x", x}}, {"x"}, {"y"}), "") << DimsToString(dims);
  }
}

TEST(InstanceNormOpTest, RegistryEntryAndErrors) {
  EXPECT_EQ(OpRegistry::Global().Get("instance_norm").jit, JitLowering::kFramework);
  EXPECT_FLOAT_EQ(std::get<float>(*OpRegistry::Global().Get("instance_norm").FindAttr("epsilon")->default_value), 1e-5f);
  std::string e = ErrorOf([] { test::RunOp(InstanceNorm(false), {{"x", FloatTensor({3}, {1, 2, 3})}}); });
  EXPECT_NE(e.find("instance_norm"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected rank >= 2 ([N, C, ...]), got [3]"), std::string::npos) << e;
  e = ErrorOf([] {
    test::RunOp(InstanceNorm(), {{"x", FloatTensor({1, 2, 2}, {1, 2, 3, 4})},
                                 {"s", FloatTensor({3}, {1, 1, 1})},
                                 {"b", FloatTensor({2}, {0, 0})}});
  });
  EXPECT_NE(e.find("input Scale: expected dims [2] (X's channels, dim 1 of [1,2,2]), got [3]"), std::string::npos)
      << e;
  e = ErrorOf([] { test::RunOp(InstanceNorm(false), {{"x", test::Int64Tensor({1, 2}, {1, 2})}}); });
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
}

TEST(InstanceNormOpJitTest, FrameworkKernelsRunInsideACluster) {
  test::LoweringCase c;
  c.name = "instance_norm";
  const proto::OpDesc fwd = InstanceNorm();
  c.ops = {fwd, OpRegistry::Global().Get("instance_norm").grad_maker(fwd)[0]};
  c.inputs = {{"x", {3, 4, 5, 6}}, {"s", {4}}, {"b", {4}}, {"y@GRAD", {3, 4, 5, 6}}};
  c.outputs = {"y", "x@GRAD", "s@GRAD", "b@GRAD"};
  const auto obj = test::CheckLoweringNumerics(c, 1e-5, 1e-5);
  ASSERT_EQ(obj->program.instructions.size(), 2u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name(), "instance_norm") << obj->Listing();
}

}  // namespace
}  // namespace kiln
