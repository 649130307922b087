// elementwise_pow: std::pow's values and special cases in f32 and f64 with Y
// broadcast, exact integer powers (wrapping, negative exponents refused),
// grads by finite differences and torch's zero cases, the registry entry,
// errors, and the JIT's generated forward and grad against the reference
// kernels on both ISAs, over a grid of IEEE pow's special cases.
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

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

proto::OpDesc Pow(int64_t axis = -1) {
  return OpBuilder("elementwise_pow").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", axis).Build();
}

// Every pair of these: IEEE pow's special cases (signed zeros, infinities,
// NaN, +-1, odd and even integers, fractions, large exponents).
const std::vector<float> kBases = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f, -0.5f, 3.7f,
                                   -3.7f, kInf, -kInf, kNaN, 1e-3f, 10.0f, -10.0f};
const std::vector<float> kExponents = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, 3.0f, -3.0f, 0.5f, -0.5f, 2.5f,
                                       kInf, -kInf, kNaN, 7.0f, -4.0f, 31.0f, 1e9f, 1e9f + 64};

void Grid(std::vector<float>* xs, std::vector<float>* ys) {
  for (float x : kBases) {
    for (float y : kExponents) {
      xs->push_back(x);
      ys->push_back(y);
    }
  }
}

TEST(ElementwisePowOpTest, FloatsAreStdPowWithBroadcast) {
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    // X [2, 3], Y [2] on axis 0.
    const Tensor x = test::CastTo(FloatTensor({2, 3}, {2, -2, 0.5f, 9, 4, 0}), dtype);
    const Tensor y = test::CastTo(FloatTensor({2}, {3, 0.5f}), dtype);
    const Tensor got = RunAndGet(Pow(0), {{"x", x}, {"y", y}}, "out");
    EXPECT_EQ(CompareTensors(got, test::CastTo(FloatTensor({2, 3}, {8, -8, 0.125f, 3, 2, 0}), dtype), 0, 1e-7), "");
  }
  std::vector<float> xs, ys;
  Grid(&xs, &ys);
  const Dims d = {static_cast<int64_t>(xs.size())};
  const Tensor got = RunAndGet(Pow(), {{"x", FloatTensor(d, xs)}, {"y", FloatTensor(d, ys)}}, "out");
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = std::pow(xs[i], ys[i]), g = got.data<float>()[i];
    EXPECT_TRUE((std::isnan(want) && std::isnan(g)) || g == want) << xs[i] << "^" << ys[i];
  }
}

TEST(ElementwisePowOpTest, IntegersAreExactPowers) {
  EXPECT_EQ(ValuesOf<int64_t>(RunAndGet(Pow(), {{"x", test::Int64Tensor({5}, {2, -3, 0, 7, 10})},
                                                {"y", test::Int64Tensor({5}, {10, 3, 0, 0, 18})}},
                                        "out")),
            (std::vector<int64_t>{1024, -27, 1, 1, 1000000000000000000}));
  // i32 wraps as the dtype does: 3^21 mod 2^32, read as signed.
  EXPECT_EQ(ValuesOf<int32_t>(RunAndGet(
                Pow(), {{"x", TypedTensor<int32_t>({2}, {3, -2})}, {"y", TypedTensor<int32_t>({2}, {21, 31})}}, "out")),
            (std::vector<int32_t>{static_cast<int32_t>(10460353203LL & 0xffffffffLL), INT32_MIN}));
}

TEST(ElementwisePowOpTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(5);
  for (const Dims& yd : {Dims{3, 4}, Dims{4}, Dims{1}}) {
    const Tensor x = test::RandomTensor({3, 4}, DataType::kFP64, rng, 0.2, 3);
    const Tensor y = test::RandomTensor(yd, DataType::kFP64, rng, -2, 2);
    EXPECT_EQ(CheckGrad(Pow(), {{"x", x}, {"y", y}}, {"x", "y"}, {"out"}), "") << DimsToString(yd);
  }
  // A negative X with integer exponents: X@GRAD only (Y@GRAD is NaN there).
  const Tensor x = test::CastTo(FloatTensor({4}, {-1.5f, -0.7f, -2.2f, 1.3f}), DataType::kFP64);
  const Tensor y = test::CastTo(FloatTensor({4}, {2, 3, -1, -2}), DataType::kFP64);
  EXPECT_EQ(CheckGrad(Pow(), {{"x", x}, {"y", y}}, {"x"}, {"out"}), "");
}

// torch's zeros: X@GRAD is 0 where Y is 0; Y@GRAD is 0 where X is 0 and Y >= 0.
TEST(ElementwisePowOpTest, GradsAtZero) {
  const proto::OpDesc g = OpRegistry::Global().Get("elementwise_pow").grad_maker(Pow())[0];
  auto scope = test::RunOp(g, {{"x", FloatTensor({4}, {0, 0, 2, 0})},
                               {"y", FloatTensor({4}, {0, 2, 0, -1})},
                               {"out@GRAD", FloatTensor({4}, {1, 1, 1, 1})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("x@GRAD")->Get(), FloatTensor({4}, {0, 0, 0, -kInf}), 0, 0), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("y@GRAD")->Get(), FloatTensor({4}, {0, 0, float(std::log(2.0)), -kInf}),
                           0, 1e-7),
            "");
}

TEST(ElementwisePowOpTest, RegistryEntryAndErrors) {
  const OpInfo& info = OpRegistry::Global().Get("elementwise_pow");
  EXPECT_EQ(info.jit, JitLowering::kElementwise);
  EXPECT_EQ(OpRegistry::Global().Get("elementwise_pow_grad").jit, JitLowering::kElementwise);
  std::string e = ErrorOf([] {
    test::RunOp(Pow(), {{"x", test::Int64Tensor({3}, {2, 2, 2})}, {"y", test::Int64Tensor({3}, {1, 2, -1})}});
  });
  EXPECT_NE(e.find("elementwise_pow"), std::string::npos) << e;
  EXPECT_NE(e.find("input Y: integer X to a negative power (element 2 of Y is -1"), std::string::npos) << e;
  e = ErrorOf([] {
    const proto::OpDesc g = OpRegistry::Global().Get("elementwise_pow").grad_maker(Pow())[0];
    test::RunOp(g, {{"x", test::Int64Tensor({1}, {2})}, {"y", test::Int64Tensor({1}, {2})},
                    {"out@GRAD", test::Int64Tensor({1}, {1})}});
  });
  EXPECT_NE(e.find("elementwise_pow_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
}

// ---- the JIT ------------------------------------------------------------------------

test::LoweringCase PowCase(bool grad, const Dims& x, const Dims& y, Isa isa) {
  test::LoweringCase c;
  c.name = "elementwise_pow";
  c.options.isa = isa;
  c.ops = {grad ? OpRegistry::Global().Get("elementwise_pow").grad_maker(Pow())[0] : Pow()};
  c.inputs = {{"x", x}, {"y", y}};
  if (grad) c.inputs.push_back({"out@GRAD", x});
  c.outputs = grad ? std::vector<std::string>{"x@GRAD", "y@GRAD"} : std::vector<std::string>{"out"};
  return c;
}

// Random positive bases and exponents in [-3, 3] (|Y ln X| <= 3.6), Y
// broadcast, at sizes around the vector widths.
TEST(ElementwisePowOpJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  std::mt19937 rng(6);
  for (Isa isa : test::TestedIsas()) {
    for (const auto& [xd, yd] : std::vector<std::pair<Dims, Dims>>{
             {{1}, {1}}, {{15}, {15}}, {{17}, {1}}, {{4099}, {4099}}, {{3, 5, 7}, {7}}}) {
      for (bool grad : {false, true}) {
        SCOPED_TRACE(std::string(grad ? "grad " : "") + DimsToString(xd) + DimsToString(yd) + " " + IsaName(isa));
        test::LoweringCase c = PowCase(grad, xd, yd, isa);
        c.given["x"] = test::RandomTensor(xd, DataType::kFP32, rng, 0.3, 3);
        c.given["y"] = test::RandomTensor(yd, DataType::kFP32, rng, -3, 3);
        const auto obj = test::CheckLoweringNumerics(c, 1e-6, 4e-6);
        ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
        EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
      }
    }
  }
}

// IEEE pow's special cases: the same NaNs, infinities, zeros and signs as
// std::pow; finite values within the documented (2 + |Y ln X|) ulp (1e9 *
// ln 10 ulp for 10^1e9 would be meaningless: those overflow to inf anyway).
TEST(ElementwisePowOpJitTest, SpecialCasesMatchStdPow) {
  std::vector<float> xs, ys;
  Grid(&xs, &ys);
  const Dims d = {static_cast<int64_t>(xs.size())};
  for (Isa isa : test::TestedIsas()) {
    test::LoweringCase c = PowCase(false, d, d, isa);
    c.given = {{"x", FloatTensor(d, xs)}, {"y", FloatTensor(d, ys)}};
    test::CheckLoweringNumerics(c, 0, 2e-5);
    test::LoweringCase g = PowCase(true, d, d, isa);
    g.given = c.given;
    g.given["out@GRAD"] = FloatTensor(d, std::vector<float>(xs.size(), 1.0f));
    test::CheckLoweringNumerics(g, 0, 2e-5);
  }
}

}  // namespace
}  // namespace kiln
