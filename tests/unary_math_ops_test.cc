// erf, floor, ceil, round, sign, reciprocal, softsign: hand-computed values,
// values against <cmath> in f32 and f64, rounding at halves and near 2^23,
// signs of zeros, sign on integers, grads by finite differences (zeros for
// the piecewise constant ops), registry entries, errors, and the generated
// kernels against the reference kernels on both ISAs (bit-exact for the
// rounding ops, the sign of zeros included).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"
#include "tests/unary_op_test_util.h"

namespace kiln {
namespace {

using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::RunAndGet;
using test::UnaryOp;
using test::UnaryVariant;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Smooth ops, drawn away from reciprocal's pole.
std::vector<UnaryVariant> Smooth() {
  return {
      {"erf", {}, [](double x) { return std::erf(x); }, 0.0, 3, true},
      {"reciprocal", {}, [](double x) { return 1 / x; }, 0.2, 4, true},
      {"softsign", {}, [](double x) { return x / (1 + std::fabs(x)); }, 0.0, 6, true},
  };
}

// The piecewise constant ones over a range that holds integers and halves.
std::vector<UnaryVariant> Steps() {
  return {
      {"floor", {}, [](double x) { return std::floor(x); }, 0.0, 9, true},
      {"ceil", {}, [](double x) { return std::ceil(x); }, 0.0, 9, true},
      {"round", {}, [](double x) { return std::nearbyint(x); }, 0.0, 9, true},
      {"sign", {}, [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }, 0.0, 3, true},
  };
}

std::vector<UnaryVariant> All() {
  std::vector<UnaryVariant> all = Smooth();
  for (const UnaryVariant& v : Steps()) all.push_back(v);
  return all;
}

TEST(UnaryMathOpsTest, HandComputedValues) {
  struct Want {
    std::string type;
    std::vector<float> x, out;
  };
  const std::vector<Want> wants = {
      {"erf", {0.0f, 1.0f, -0.5f, 2.0f}, {0.0f, 0.8427007929f, -0.5204998778f, 0.9953222650f}},
      {"floor", {1.5f, -1.5f, 2.0f, -0.2f}, {1.0f, -2.0f, 2.0f, -1.0f}},
      {"ceil", {1.5f, -1.5f, 2.0f, 0.2f}, {2.0f, -1.0f, 2.0f, 1.0f}},
      {"round", {0.5f, 1.5f, 2.5f, -2.5f}, {0.0f, 2.0f, 2.0f, -2.0f}},
      {"sign", {-3.0f, 0.0f, 2.5f, -0.1f}, {-1.0f, 0.0f, 1.0f, -1.0f}},
      {"reciprocal", {2.0f, -4.0f, 0.5f, 1.0f}, {0.5f, -0.25f, 2.0f, 1.0f}},
      {"softsign", {1.0f, -3.0f, 0.0f, 9.0f}, {0.5f, -0.75f, 0.0f, 0.9f}},
  };
  for (const Want& w : wants) {
    const Tensor got = RunAndGet(UnaryOp(w.type), {{"x", FloatTensor({4}, w.x)}}, "out");
    EXPECT_EQ(CompareTensors(got, FloatTensor({4}, w.out), 1e-7, 1e-6), "") << w.type;
  }
}

TEST(UnaryMathOpsTest, MatchFormulasInF32AndF64) { test::ExpectMatchesFormulas(All()); }

// Halves go to the even neighbour; near 2^23 the f32 spacing is 0.5 and from
// 2^23 on every float is an integer; NaN and the infinities pass through.
TEST(UnaryMathOpsTest, SpecialValuesAndRoundingEdges) {
  struct Case {
    std::string type;
    std::vector<double> x, out;
  };
  const std::vector<Case> cases = {
      {"round",
       {-0.5, 0.5, 3.5, -3.5, 4194304.5, 8388607.5, 16777216, kNaN, kInf, -kInf},
       {-0.0, 0, 4, -4, 4194304, 8388608, 16777216, kNaN, kInf, -kInf}},
      {"floor", {8388607.5, -8388607.5, 1e30, -1e-30, kNaN, -kInf}, {8388607, -8388608, 1e30, -1, kNaN, -kInf}},
      {"ceil", {8388607.5, -8388607.5, -1e30, 1e-30, kNaN, kInf}, {8388608, -8388607, -1e30, 1, kNaN, kInf}},
      {"sign", {kNaN, kInf, -kInf, 1e-30}, {kNaN, 1, -1, 1}},
      {"erf", {kInf, -kInf, kNaN, 10}, {1, -1, kNaN, 1}},
      {"reciprocal", {0, kInf, -kInf, kNaN}, {kInf, 0, -0.0, kNaN}},
      {"softsign", {kInf, -kInf, kNaN}, {kNaN, kNaN, kNaN}},
  };
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    for (const Case& c : cases) {
      const Tensor got = RunAndGet(UnaryOp(c.type), {{"x", test::ValuesTensor(c.x, dtype)}}, "out");
      EXPECT_EQ(CompareTensors(got, test::ValuesTensor(c.out, dtype), 0, 0), "") << c.type << " " << DataTypeName(dtype);
    }
  }
  // Zeros keep their sign: floor(-0) = -0, ceil(-0.3) = -0, round(-0.3) = -0, sign(-0) = -0.
  for (const std::string type : {"floor", "ceil", "round", "sign"}) {
    const Tensor got = RunAndGet(UnaryOp(type), {{"x", FloatTensor({3}, {-0.0f, -0.3f, 0.0f})}}, "out");
    EXPECT_TRUE(std::signbit(got.data<float>()[0])) << type;
    EXPECT_FALSE(std::signbit(got.data<float>()[2])) << type;
  }
}

TEST(UnaryMathOpsTest, SignTakesIntegers) {
  const Tensor i64 = RunAndGet(UnaryOp("sign"), {{"x", test::TypedTensor<int64_t>({4}, {-7, 0, 5, INT64_MIN})}}, "out");
  EXPECT_EQ(test::ValuesOf<int64_t>(i64), (std::vector<int64_t>{-1, 0, 1, -1}));
  const Tensor i32 = RunAndGet(UnaryOp("sign"), {{"x", test::TypedTensor<int32_t>({3}, {3, -2, 0})}}, "out");
  EXPECT_EQ(test::ValuesOf<int32_t>(i32), (std::vector<int32_t>{1, -1, 0}));
}

TEST(UnaryMathOpsTest, GradsMatchFiniteDifferences) { test::ExpectGradsMatchFiniteDifferences(Smooth()); }

TEST(UnaryMathOpsTest, StepOpsHaveZeroGrads) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::string type : {"floor", "ceil", "round", "sign"}) {
    EXPECT_EQ(CompareTensors(test::GradAt(type, {}, {-1.5f, 0.0f, 2.5f, nan}, {3, 3, nan, 3}),
                             FloatTensor({4}, {0, 0, 0, 0}), 0, 0),
              "")
        << type;
  }
  // reciprocal at 2: -dOut / 4.
  EXPECT_EQ(CompareTensors(test::GradAt("reciprocal", {}, {2, -0.5f}, {4, 1}), FloatTensor({2}, {-1, -4}), 0, 0), "");
}

TEST(UnaryMathOpsTest, RegistryEntries) {
  const std::map<std::string, std::vector<std::string>> reads = {
      {"erf", {"X", "Out@GRAD"}},  {"floor", {"Out@GRAD"}},      {"ceil", {"Out@GRAD"}},
      {"round", {"Out@GRAD"}},     {"sign", {"Out@GRAD"}},       {"reciprocal", {"Out", "Out@GRAD"}},
      {"softsign", {"X", "Out@GRAD"}},
  };
  for (const auto& [type, slots] : reads) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_FALSE(info.doc.empty());
    EXPECT_EQ(info.jit, JitLowering::kElementwise) << type;
    EXPECT_TRUE(info.elementwise) << type;
    const proto::OpDesc g = info.grad_maker(UnaryOp(type))[0];
    EXPECT_EQ(g.type(), type + "_grad");
    std::vector<std::string> got;
    for (const auto& s : g.inputs()) got.push_back(s.name());
    EXPECT_EQ(got, slots) << type;
    const OpInfo& grad = OpRegistry::Global().Get(type + "_grad");
    EXPECT_EQ(grad.jit, JitLowering::kElementwise) << type;
    EXPECT_NE(grad.doc.find("Gradient of " + type), std::string::npos) << grad.doc;
  }
}

TEST(UnaryMathOpsTest, ErrorsNameTheOpAndTheProblem) {
  std::string e = ErrorOf([] { test::RunOp(UnaryOp("floor"), {{"x", test::Int64Tensor({2}, {1, 2})}}); });
  EXPECT_NE(e.find("floor"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(UnaryOp("sign"), {{"x", test::TypedTensor<bool>({1}, {true})}}); });
  EXPECT_NE(e.find("sign"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype f32, f64, i64 or i32, got bool"), std::string::npos) << e;
  // The grad of a step op needs Out@GRAD for X@GRAD's dims.
  e = ErrorOf([] {
    proto::OpDesc g = OpBuilder("round_grad").In("Out@GRAD", {kEmptyVarName}).Out("X@GRAD", {"dx"}).Build();
    test::RunOp(g, {});
  });
  EXPECT_NE(e.find("round_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("input Out@GRAD is required"), std::string::npos) << e;
}

// ---- the JIT's generated kernels --------------------------------------------------

TEST(UnaryMathOpsJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  test::ExpectGeneratedKernelsMatch(Smooth());
  // The rounding ops are exact: no tolerance.
  test::ExpectGeneratedKernelsMatch(Steps(), 0, 0);
}

// Halves, both sides of 2^22, 2^23 and 2^24, tiny values, NaN, infinities:
// bit for bit what the reference kernels give, the sign of zeros included.
TEST(UnaryMathOpsJitTest, RoundingEdgesAreExactWithSignedZeros) {
  std::vector<float> x = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f};
  for (float base : {0.0f, 1.0f, 2.0f, 3.0f, 4194303.0f, 4194304.0f, 8388606.0f, 8388607.0f, 16777215.0f}) {
    for (float frac : {0.0f, 0.25f, 0.5f, 0.75f}) {
      for (float s : {1.0f, -1.0f}) x.push_back(s * (base + frac));
    }
  }
  x.push_back(8388608.0f);
  x.push_back(-8388609.0f);
  x.push_back(3e38f);
  for (Isa isa : test::TestedIsas()) {
    for (const std::string type : {"floor", "ceil", "round", "sign"}) {
      SCOPED_TRACE(type + " " + IsaName(isa));
      const Tensor got = test::RunGenerated(type, {}, x, isa);
      const Tensor want = RunAndGet(UnaryOp(type), {{"x", FloatTensor({static_cast<int64_t>(x.size())}, x)}}, "out");
      for (size_t i = 0; i < x.size(); ++i) {
        const float g = got.data<float>()[i], w = want.data<float>()[i];
        EXPECT_TRUE((std::isnan(g) && std::isnan(w)) || (g == w && std::signbit(g) == std::signbit(w)))
            << "x = " << x[i] << ": got " << g << ", want " << w;
      }
    }
  }
}

TEST(UnaryMathOpsJitTest, SpecialValuesMatchTheReference) {
  const std::vector<float> specials = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 0.0f, -0.0f,
                                       1e-40f, -2.0f, 50.0f, -100.0f, 0.5f};
  for (Isa isa : test::TestedIsas()) {
    for (const UnaryVariant& v : Smooth()) {
      test::ExpectGeneratedKernelMatches(v, FloatTensor({10}, specials), isa, false, 2e-6, 2e-5);
      test::ExpectGeneratedKernelMatches(v, FloatTensor({10}, specials), isa, true, 2e-6, 2e-5);
    }
  }
}

}  // namespace
}  // namespace kiln
