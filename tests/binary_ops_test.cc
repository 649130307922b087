// elementwise_max, elementwise_min, elementwise_mod: values with Y broadcast
// from axis in every dtype, NaN propagation, the grads (finite differences,
// Paddle's tie rule, NaN), mod's two sign conventions and its errors, the
// registry entries, and the JIT: max/min (and grads) in generated kernels
// against the reference kernels on both ISAs, mod's framework kernel inside a
// cluster.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"
#include "tests/unary_op_test_util.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::RunAndGet;
using test::TypedTensor;
using test::ValuesOf;

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

proto::OpDesc Binary(const std::string& type, int64_t axis = -1, const AttrMap& attrs = {}) {
  OpBuilder b(type);
  b.In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", axis);
  for (const auto& [k, v] : attrs) b.Attr(k, v);
  return b.Build();
}

template <typename T>
std::vector<T> RunBinary(const std::string& type, const Tensor& x, const Tensor& y, int64_t axis = -1,
                   const AttrMap& attrs = {}) {
  return ValuesOf<T>(RunAndGet(Binary(type, axis, attrs), {{"x", x}, {"y", y}}, "out"));
}

// X [2, 3], Y [2] on axis 0: Y[i] against row i.
template <typename T>
void ExpectMaxMinInDtype() {
  const Tensor x = TypedTensor<T>({2, 3}, {1, 5, 3, -4, 0, 7});
  const Tensor y = TypedTensor<T>({2}, {3, -1});
  EXPECT_EQ(RunBinary<T>("elementwise_max", x, y, 0), (std::vector<T>{3, 5, 3, -1, 0, 7}));
  EXPECT_EQ(RunBinary<T>("elementwise_min", x, y, 0), (std::vector<T>{1, 3, 3, -4, -1, -1}));
  // Y [3] on the trailing dims.
  const Tensor y3 = TypedTensor<T>({3}, {2, 2, 9});
  EXPECT_EQ(RunBinary<T>("elementwise_max", x, y3), (std::vector<T>{2, 5, 9, 2, 2, 9}));
}

TEST(BinaryOpsTest, MaxMinInEveryDtypeWithBroadcast) {
  ExpectMaxMinInDtype<float>();
  ExpectMaxMinInDtype<double>();
  ExpectMaxMinInDtype<int64_t>();
  ExpectMaxMinInDtype<int32_t>();
}

TEST(BinaryOpsTest, MaxMinPropagateNaN) {
  const Tensor x = FloatTensor({4}, {kNaNf, 1, kNaNf, -INFINITY});
  const Tensor y = FloatTensor({4}, {1, kNaNf, kNaNf, 3});
  for (const std::string type : {"elementwise_max", "elementwise_min"}) {
    const std::vector<float> got = RunBinary<float>(type, x, y);
    EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]) && std::isnan(got[2])) << type;
    EXPECT_EQ(got[3], type == "elementwise_max" ? 3.0f : -INFINITY) << type;
  }
}

// Distinct values (no ties), Y broadcast on both axes.
TEST(BinaryOpsTest, MaxMinGradsMatchFiniteDifferences) {
  std::mt19937 rng(3);
  struct Shape {
    Dims x, y;
    int64_t axis;
  };
  for (const Shape& s : {Shape{{7}, {7}, -1}, Shape{{3, 4}, {4}, -1}, Shape{{3, 4, 2}, {3, 1}, 0}}) {
    for (const std::string type : {"elementwise_max", "elementwise_min"}) {
      const Tensor x = test::RandomTensor(s.x, DataType::kFP64, rng, -2, 2);
      const Tensor y = test::RandomTensor(s.y, DataType::kFP64, rng, -2, 2);
      EXPECT_EQ(CheckGrad(Binary(type, s.axis), {{"x", x}, {"y", y}}, {"x", "y"}, {"out"}), "")
          << type << " " << DimsToString(s.x) << DimsToString(s.y);
    }
  }
}

// Paddle's rule: a tie sends dOut to Y; a NaN operand sends it nowhere.
TEST(BinaryOpsTest, TiesGoToYAndNaNGetsNothing) {
  for (const std::string type : {"elementwise_max", "elementwise_min"}) {
    const proto::OpDesc fwd = Binary(type);
    const proto::OpDesc g = OpRegistry::Global().Get(type).grad_maker(fwd)[0];
    const Tensor x = FloatTensor({4}, {2, 5, 1, kNaNf});
    const Tensor y = FloatTensor({4}, {2, 1, 5, 1});
    auto scope = test::RunOp(g, {{"x", x}, {"y", y}, {"out@GRAD", FloatTensor({4}, {10, 20, 30, 40})}});
    const bool max = type == "elementwise_max";
    EXPECT_EQ(CompareTensors(scope->GetVar("x@GRAD")->Get(), FloatTensor({4}, {0, max ? 20.f : 0, max ? 0 : 30.f, 0}),
                             0, 0),
              "")
        << type;
    EXPECT_EQ(CompareTensors(scope->GetVar("y@GRAD")->Get(), FloatTensor({4}, {10, max ? 0 : 20.f, max ? 30.f : 0, 0}),
                             0, 0),
              "")
        << type;
  }
}

TEST(BinaryOpsTest, ModFollowsTheDivisorOrTheDividend) {
  // Python: -7 % 3 = 2, 7 % -3 = -2; C: -7 % 3 = -1, 7 % -3 = 1.
  const std::vector<int64_t> xs = {-7, 7, -7, 7, 6, -6, 0};
  const std::vector<int64_t> ys = {3, -3, -3, 3, 3, -4, 5};
  EXPECT_EQ(RunBinary<int64_t>("elementwise_mod", test::Int64Tensor({7}, xs), test::Int64Tensor({7}, ys)),
            (std::vector<int64_t>{2, -2, -1, 1, 0, -2, 0}));
  EXPECT_EQ(RunBinary<int64_t>("elementwise_mod", test::Int64Tensor({7}, xs), test::Int64Tensor({7}, ys), -1,
                         {{"fmod", true}}),
            (std::vector<int64_t>{-1, 1, -1, 1, 0, -2, 0}));
  EXPECT_EQ(RunBinary<int32_t>("elementwise_mod", TypedTensor<int32_t>({2}, {INT32_MIN, -5}), TypedTensor<int32_t>({2}, {-1, 2})),
            (std::vector<int32_t>{0, 1}));
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const Tensor x = test::ValuesTensor({-7.5, 7.5, -7.5, 5.25, 1}, dtype);
    const Tensor y = test::ValuesTensor({2, -2, -2, 0.5, 0}, dtype);
    const Tensor py = RunAndGet(Binary("elementwise_mod"), {{"x", x}, {"y", y}}, "out");
    EXPECT_EQ(CompareTensors(py, test::ValuesTensor({0.5, -0.5, -1.5, 0.25, NAN}, dtype), 0, 0), "");
    const Tensor c = RunAndGet(Binary("elementwise_mod", -1, {{"fmod", true}}), {{"x", x}, {"y", y}}, "out");
    EXPECT_EQ(CompareTensors(c, test::ValuesTensor({-1.5, 1.5, -1.5, 0.25, NAN}, dtype), 0, 0), "");
  }
  // Y [2] on axis 0 of X [2, 2].
  EXPECT_EQ(RunBinary<int64_t>("elementwise_mod", test::Int64Tensor({2, 2}, {5, -5, 9, 10}), test::Int64Tensor({2}, {3, 4}), 0),
            (std::vector<int64_t>{2, 1, 1, 2}));
}

TEST(BinaryOpsTest, RegistryEntries) {
  for (const std::string type : {"elementwise_max", "elementwise_min"}) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_EQ(info.jit, JitLowering::kElementwise) << type;
    EXPECT_EQ(OpRegistry::Global().Get(type + "_grad").jit, JitLowering::kElementwise) << type;
    EXPECT_NE(OpRegistry::Global().Get(type + "_grad").doc.find("ties go to Y"), std::string::npos);
  }
  const OpInfo& mod = OpRegistry::Global().Get("elementwise_mod");
  EXPECT_EQ(mod.jit, JitLowering::kFramework);
  EXPECT_FALSE(mod.grad_maker);
  EXPECT_FALSE(std::get<bool>(*mod.FindAttr("fmod")->default_value));
}

TEST(BinaryOpsTest, ErrorsNameTheOpAndTheProblem) {
  std::string e = ErrorOf(
      [] { test::RunOp(Binary("elementwise_mod"), {{"x", test::Int64Tensor({3}, {1, 2, 3})}, {"y", test::Int64Tensor({3}, {1, 0, 2})}}); });
  EXPECT_NE(e.find("elementwise_mod"), std::string::npos) << e;
  EXPECT_NE(e.find("input Y: integer division by zero (element 1 of Y is 0)"), std::string::npos) << e;
  e = ErrorOf([] {
    test::RunOp(Binary("elementwise_max"), {{"x", FloatTensor({2}, {1, 2})}, {"y", test::Int64Tensor({2}, {1, 2})}});
  });
  EXPECT_NE(e.find("elementwise_max"), std::string::npos) << e;
  EXPECT_NE(e.find("input Y: expected dtype f32 (as X), got i64"), std::string::npos) << e;
  e = ErrorOf([] {
    test::RunOp(Binary("elementwise_min"), {{"x", TypedTensor<bool>({1}, {true})}, {"y", TypedTensor<bool>({1}, {true})}});
  });
  EXPECT_NE(e.find("input X: expected dtype f32, f64, i64 or i32, got bool"), std::string::npos) << e;
  e = ErrorOf([] {
    test::RunOp(Binary("elementwise_min"), {{"x", FloatTensor({2, 3}, std::vector<float>(6))}, {"y", FloatTensor({2}, {1, 2})}});
  });
  EXPECT_NE(e.find("elementwise_min"), std::string::npos) << e;
  EXPECT_NE(e.find("does not broadcast into X [2,3]"), std::string::npos) << e;
}

// ---- the JIT ------------------------------------------------------------------------

test::LoweringCase MaxMinCase(const std::string& type, bool grad, const Dims& x, const Dims& y, int64_t axis,
                              Isa isa) {
  test::LoweringCase c;
  c.name = type;
  c.options.isa = isa;
  const proto::OpDesc fwd = Binary(type, axis);
  c.ops = {grad ? OpRegistry::Global().Get(type).grad_maker(fwd)[0] : fwd};
  c.inputs = {{"x", x}, {"y", y}};
  if (grad) c.inputs.push_back({"out@GRAD", x});
  c.outputs = grad ? std::vector<std::string>{"x@GRAD", "y@GRAD"} : std::vector<std::string>{"out"};
  return c;
}

TEST(BinaryOpsJitTest, MaxMinAndGradsMatchTheReferenceOnBothIsas) {
  struct Shape {
    Dims x, y;
    int64_t axis;
  };
  const std::vector<Shape> shapes = {{{1}, {1}, -1},     {{17}, {17}, -1},    {{4099}, {1}, -1},
                                     {{3, 5, 7}, {7}, -1}, {{6, 16}, {6}, 0}, {{5, 33}, {5, 33}, -1}};
  for (Isa isa : test::TestedIsas()) {
    for (const Shape& s : shapes) {
      for (const std::string type : {"elementwise_max", "elementwise_min"}) {
        for (bool grad : {false, true}) {
          SCOPED_TRACE(type + (grad ? "_grad " : " ") + DimsToString(s.x) + DimsToString(s.y) + " " + IsaName(isa));
          const test::LoweringCase c = MaxMinCase(type, grad, s.x, s.y, s.axis, isa);
          const auto obj = test::CheckLoweringNumerics(c, 1e-6, 1e-6, static_cast<unsigned>(Numel(s.x)));
          ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
          EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
        }
      }
    }
  }
}

// Ties, NaN and infinities through the generated kernels.
TEST(BinaryOpsJitTest, TiesAndNaNMatchTheReference) {
  const std::vector<float> xs = {1, 2, 2, kNaNf, 3, -INFINITY, INFINITY, 0.0f, -0.0f, kNaNf, 4, -1, 5, 5, 6, 7, 8};
  const std::vector<float> ys = {1, 3, 1, 2, kNaNf, 0, INFINITY, -0.0f, 0.0f, kNaNf, 4, -1, 0, 5, 6, 9, 8};
  const Dims d = {static_cast<int64_t>(xs.size())};
  for (Isa isa : test::TestedIsas()) {
    for (const std::string type : {"elementwise_max", "elementwise_min"}) {
      for (bool grad : {false, true}) {
        test::LoweringCase c = MaxMinCase(type, grad, d, d, -1, isa);
        c.given = {{"x", FloatTensor(d, xs)}, {"y", FloatTensor(d, ys)}};
        test::CheckLoweringNumerics(c, 0, 0);
      }
    }
  }
}

// mod is kFramework: its kernel runs in the cluster beside a generated max.
TEST(BinaryOpsJitTest, ModRunsItsFrameworkKernelInsideACluster) {
  for (bool fmod : {false, true}) {
    test::LoweringCase c;
    c.name = "mod";
    c.ops = {Binary("elementwise_mod", -1, {{"fmod", fmod}}),
             OpBuilder("elementwise_max").In("X", {"out"}).In("Y", {"y"}).Out("Out", {"m"}).Build()};
    c.inputs = {{"x", {5, 9}}, {"y", {9}}};
    c.outputs = {"m"};
    const auto obj = test::CheckLoweringNumerics(c, 0, 0);
    ASSERT_EQ(obj->program.instructions.size(), 2u) << obj->Listing();
    EXPECT_EQ(obj->program.instructions[0].kernel->name(), "elementwise_mod") << obj->Listing();
  }
}

}  // namespace
}  // namespace kiln
