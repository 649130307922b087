// elu, selu, celu, hard_sigmoid, hard_swish, thresholded_relu: hand-computed
// values (ONNX's documented defaults), values against formulas in f32 and
// f64, special values, grads by finite differences and at the kinks,
// registry entries, errors, and the generated kernels (forward and grad)
// against the reference kernels on both ISAs, expm1's tiny inputs included.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"
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
constexpr double kSeluScale = 1.05070102214813232421875;
constexpr double kSeluAlpha = 1.67326319217681884765625;

double Elu(double x, double a) { return x > 0 ? x : a * std::expm1(x); }
double Clamp(double t, double hi) { return t < 0 ? 0 : t > hi ? hi : t; }

std::vector<UnaryVariant> Variants() {
  return {
      {"elu", {}, [](double x) { return Elu(x, 1); }, 0.0, 5, true},
      {"elu", {{"alpha", 0.5f}}, [](double x) { return Elu(x, 0.5f); }, 0.0, 5, true},
      {"selu", {}, [](double x) { return kSeluScale * Elu(x, kSeluAlpha); }, 0.0, 5, true},
      {"celu", {}, [](double x) { return Elu(x, 1); }, 0.0, 5, true},
      {"celu", {{"alpha", 2.0f}}, [](double x) { return x > 0 ? x : 2 * std::expm1(x / 2); }, 0.0, 5, true},
      // A negative alpha puts expm1's argument above 1 (the exp branch).
      {"celu", {{"alpha", -1.5f}}, [](double x) { return x > 0 ? x : -1.5f * std::expm1(x / -1.5f); }, 0.0, 4, true},
      {"hard_sigmoid", {}, [](double x) { return Clamp(0.2f * x + 0.5f, 1); }, 0.0, 4, true},
      {"hard_sigmoid",
       {{"slope", 0.5f}, {"offset", 0.25f}},
       [](double x) { return Clamp(0.5f * x + 0.25f, 1); },
       0.0,
       3,
       true},
      {"hard_swish", {}, [](double x) { return x * Clamp(x + 3, 6) / 6; }, 0.0, 5, true},
      {"hard_swish",
       {{"threshold", 4.0f}, {"scale", 8.0f}, {"offset", 1.0f}},
       [](double x) { return x * Clamp(x + 1, 4) / 8; },
       0.0,
       5,
       true},
      {"thresholded_relu", {}, [](double x) { return x > 1 ? x : 0; }, 0.0, 3, true},
      {"thresholded_relu", {{"threshold", -0.5f}}, [](double x) { return x > -0.5f ? x : 0; }, 0.0, 3, true},
  };
}

TEST(OnnxActivationOpsTest, HandComputedValues) {
  struct Want {
    std::string type;
    std::vector<float> x, out;
  };
  // ONNX's operator examples with their default attributes.
  const std::vector<Want> wants = {
      {"elu", {-1.0f, 0.0f, 1.0f}, {-0.63212055882f, 0.0f, 1.0f}},
      {"selu", {-1.0f, 0.0f, 1.0f}, {-1.11133072f, 0.0f, 1.05070102f}},
      {"celu", {-1.0f, 0.0f, 2.0f}, {-0.63212055882f, 0.0f, 2.0f}},
      {"hard_sigmoid", {-1.0f, 0.0f, 1.0f}, {0.3f, 0.5f, 0.7f}},
      {"hard_sigmoid", {-3.0f, 5.0f, 2.5f}, {0.0f, 1.0f, 1.0f}},
      {"hard_swish", {-4.0f, 1.0f, 4.0f}, {0.0f, 0.6666667f, 4.0f}},
      {"thresholded_relu", {0.5f, 1.0f, 2.0f}, {0.0f, 0.0f, 2.0f}},
  };
  for (const Want& w : wants) {
    const Tensor got = RunAndGet(UnaryOp(w.type), {{"x", FloatTensor({3}, w.x)}}, "out");
    EXPECT_EQ(CompareTensors(got, FloatTensor({3}, w.out), 1e-7, 1e-6), "") << w.type;
  }
}

TEST(OnnxActivationOpsTest, MatchFormulasInF32AndF64) { test::ExpectMatchesFormulas(Variants()); }

TEST(OnnxActivationOpsTest, SpecialValues) {
  struct Case {
    std::string type;
    std::vector<double> x, out;
  };
  const std::vector<Case> cases = {
      {"elu", {kNaN, -kInf, kInf, -1e-30}, {kNaN, -1, kInf, -1e-30}},
      {"selu", {kNaN, -kInf, kInf}, {kNaN, -kSeluScale * kSeluAlpha, kInf}},
      {"celu", {kNaN, -kInf, kInf}, {kNaN, -1, kInf}},
      {"hard_sigmoid", {kNaN, -kInf, kInf}, {kNaN, 0, 1}},
      // -inf * 0, as torch.nn.functional.hardswish and ONNX's formula give.
      {"hard_swish", {kNaN, -kInf, kInf}, {kNaN, kNaN, kInf}},
      {"thresholded_relu", {kNaN, -kInf, kInf}, {0, 0, kInf}},
  };
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    for (const Case& c : cases) {
      const Tensor got = RunAndGet(UnaryOp(c.type), {{"x", test::ValuesTensor(c.x, dtype)}}, "out");
      EXPECT_EQ(CompareTensors(got, test::ValuesTensor(c.out, dtype), 0, 1e-6), "")
          << c.type << " " << DataTypeName(dtype);
    }
  }
}

TEST(OnnxActivationOpsTest, GradsMatchFiniteDifferences) { test::ExpectGradsMatchFiniteDifferences(Variants()); }

// At and around the kinks, the side each op documents.
TEST(OnnxActivationOpsTest, GradsAtKinks) {
  // elu at 0 takes the exp side: alpha * e^0 = alpha.
  EXPECT_EQ(CompareTensors(test::GradAt("elu", {{"alpha", 0.5f}}, {0, 1, -1}, {2, 2, 2}),
                           FloatTensor({3}, {1, 2, float(2 * 0.5 * std::exp(-1.0))}), 1e-7, 1e-6),
            "");
  // hard_sigmoid: slope strictly inside (0, 1), zero at and beyond the ends.
  EXPECT_EQ(CompareTensors(test::GradAt("hard_sigmoid", {}, {-2.5f, 2.5f, 0, 4}, {1, 1, 1, 1}),
                           FloatTensor({4}, {0, 0, 0.2f, 0}), 1e-7, 0),
            "");
  // hard_swish: 0 below -3, 1 above 3, (2x + 3) / 6 between.
  EXPECT_EQ(CompareTensors(test::GradAt("hard_swish", {}, {-4, 4, 0, 1.5f}, {1, 1, 1, 1}),
                           FloatTensor({4}, {0, 1, 0.5f, 1}), 1e-7, 0),
            "");
  // thresholded_relu at its threshold: 0 (X > threshold strictly).
  EXPECT_EQ(CompareTensors(test::GradAt("thresholded_relu", {}, {1, 1.5f}, {3, 3}), FloatTensor({2}, {0, 3}), 0, 0), "");
}

TEST(OnnxActivationOpsTest, RegistryEntries) {
  for (const std::string type : {"elu", "selu", "celu", "hard_sigmoid", "hard_swish", "thresholded_relu"}) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_EQ(info.jit, JitLowering::kElementwise) << type;
    const proto::OpDesc g = info.grad_maker(UnaryOp(type))[0];
    EXPECT_EQ(InputArgs(g, "X").size(), 1u) << type;
    EXPECT_EQ(OpRegistry::Global().Get(type + "_grad").jit, JitLowering::kElementwise) << type;
  }
  auto dflt = [](const std::string& type, const std::string& attr) {
    return std::get<float>(*OpRegistry::Global().Get(type).FindAttr(attr)->default_value);
  };
  EXPECT_EQ(dflt("elu", "alpha"), 1.0f);
  EXPECT_EQ(dflt("selu", "alpha"), 1.67326319217681884765625f);
  EXPECT_EQ(dflt("selu", "scale"), 1.05070102214813232421875f);
  EXPECT_EQ(dflt("celu", "alpha"), 1.0f);
  EXPECT_EQ(dflt("hard_sigmoid", "slope"), 0.2f);
  EXPECT_EQ(dflt("hard_sigmoid", "offset"), 0.5f);
  EXPECT_EQ(dflt("hard_swish", "threshold"), 6.0f);
  EXPECT_EQ(dflt("thresholded_relu", "threshold"), 1.0f);
}

TEST(OnnxActivationOpsTest, ErrorsNameTheOpAndTheProblem) {
  std::string e = ErrorOf([] { test::RunOp(UnaryOp("celu", {{"alpha", 0.0f}}), {{"x", FloatTensor({1}, {1})}}); });
  EXPECT_NE(e.find("celu"), std::string::npos) << e;
  EXPECT_NE(e.find("attribute alpha: expected a finite nonzero value, got 0"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(UnaryOp("hard_swish", {{"scale", 0.0f}}), {{"x", FloatTensor({1}, {1})}}); });
  EXPECT_NE(e.find("hard_swish"), std::string::npos) << e;
  EXPECT_NE(e.find("attribute scale: expected a finite nonzero value, got 0"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(UnaryOp("elu"), {{"x", test::Int64Tensor({1}, {1})}}); });
  EXPECT_NE(e.find("elu"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
}

// ---- the JIT's generated kernels --------------------------------------------------

TEST(OnnxActivationOpsJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  test::ExpectGeneratedKernelsMatch(Variants());
}

// expm1 near 0 (where exp(x) - 1 would cancel), the exp branch's edge at 1,
// the kinks, NaN and the infinities.
TEST(OnnxActivationOpsJitTest, SpecialValuesMatchTheReference) {
  const std::vector<float> specials = {std::numeric_limits<float>::quiet_NaN(),
                                       INFINITY,
                                       -INFINITY,
                                       0.0f,
                                       -0.0f,
                                       -1e-7f,
                                       -3e-5f,
                                       -1e-3f,
                                       -0.999f,
                                       -1.0f,
                                       -1.001f,
                                       -2.5f,
                                       2.5f,
                                       -3.0f,
                                       3.0f,
                                       1.0f,
                                       -90.0f};
  const Tensor x = FloatTensor({static_cast<int64_t>(specials.size())}, specials);
  for (Isa isa : test::TestedIsas()) {
    for (const UnaryVariant& v : Variants()) {
      // Relative to the value for expm1's tiny results.
      test::ExpectGeneratedKernelMatches(v, x, isa, false, 1e-30, 4e-6);
      test::ExpectGeneratedKernelMatches(v, x, isa, true, 1e-30, 4e-6);
    }
  }
}

}  // namespace
}  // namespace kiln
