// sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh: values
// against <cmath> in f32 and f64, special values, grads by finite
// differences, registry entries (forwards kFramework; the grads that the IR
// expresses elementwise), errors, the elementwise grads' generated kernels
// against the reference kernels, and a forward op running its framework
// kernel inside a cluster.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
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

// Domains kept inside each function's (and its derivative's) smooth range.
std::vector<UnaryVariant> Variants() {
  return {
      {"sin", {}, [](double x) { return std::sin(x); }, 0.0, 6, true},
      {"cos", {}, [](double x) { return std::cos(x); }, 0.0, 6, true},
      {"tan", {}, [](double x) { return std::tan(x); }, 0.0, 1.2, true},
      {"asin", {}, [](double x) { return std::asin(x); }, 0.0, 0.9, true},
      {"acos", {}, [](double x) { return std::acos(x); }, 0.0, 0.9, true},
      {"atan", {}, [](double x) { return std::atan(x); }, 0.0, 5, true},
      {"sinh", {}, [](double x) { return std::sinh(x); }, 0.0, 4, true},
      {"cosh", {}, [](double x) { return std::cosh(x); }, 0.0, 4, true},
      {"asinh", {}, [](double x) { return std::asinh(x); }, 0.0, 5, true},
      {"acosh", {}, [](double x) { return std::acosh(x); }, 1.1, 5, false},
      {"atanh", {}, [](double x) { return std::atanh(x); }, 0.0, 0.9, true},
  };
}

// The variants whose grads are elementwise.
std::vector<UnaryVariant> ElementwiseGrads() {
  const std::set<std::string> ew = {"tan", "asin", "acos", "atan", "asinh", "acosh", "atanh"};
  std::vector<UnaryVariant> out;
  for (const UnaryVariant& v : Variants()) {
    if (ew.count(v.type)) out.push_back(v);
  }
  return out;
}

TEST(TrigOpsTest, HandComputedValues) {
  struct Want {
    std::string type;
    std::vector<float> x, out;
  };
  const double pi = 3.14159265358979323846;
  const std::vector<Want> wants = {
      {"sin", {0.0f, float(pi / 2), float(pi / 6)}, {0.0f, 1.0f, 0.5f}},
      {"cos", {0.0f, float(pi / 3), float(pi)}, {1.0f, 0.5f, -1.0f}},
      {"tan", {0.0f, float(pi / 4), float(-pi / 4)}, {0.0f, 1.0f, -1.0f}},
      {"asin", {0.0f, 1.0f, 0.5f}, {0.0f, float(pi / 2), float(pi / 6)}},
      {"acos", {1.0f, 0.0f, -1.0f}, {0.0f, float(pi / 2), float(pi)}},
      {"atan", {0.0f, 1.0f, -1.0f}, {0.0f, float(pi / 4), float(-pi / 4)}},
      {"sinh", {0.0f, 1.0f, -1.0f}, {0.0f, 1.1752011936f, -1.1752011936f}},
      {"cosh", {0.0f, 1.0f, -1.0f}, {1.0f, 1.5430806348f, 1.5430806348f}},
      {"asinh", {0.0f, 1.1752011936f, -1.0f}, {0.0f, 1.0f, -0.8813735870f}},
      {"acosh", {1.0f, 1.5430806348f, 2.0f}, {0.0f, 1.0f, 1.3169578969f}},
      {"atanh", {0.0f, 0.5f, -0.5f}, {0.0f, 0.5493061443f, -0.5493061443f}},
  };
  for (const Want& w : wants) {
    const Tensor got = RunAndGet(UnaryOp(w.type), {{"x", FloatTensor({3}, w.x)}}, "out");
    EXPECT_EQ(CompareTensors(got, FloatTensor({3}, w.out), 2e-7, 1e-6), "") << w.type;
  }
}

TEST(TrigOpsTest, MatchFormulasInF32AndF64) { test::ExpectMatchesFormulas(Variants(), 4e-6); }

TEST(TrigOpsTest, SpecialValues) {
  struct Case {
    std::string type;
    std::vector<double> x, out;
  };
  const std::vector<Case> cases = {
      {"sin", {kInf, kNaN}, {kNaN, kNaN}},         {"asin", {2, -1.5, kNaN}, {kNaN, kNaN, kNaN}},
      {"acos", {2, -1.5}, {kNaN, kNaN}},           {"atan", {kInf, -kInf}, {std::atan(kInf), -std::atan(kInf)}},
      {"sinh", {kInf, -kInf}, {kInf, -kInf}},      {"cosh", {kInf, -kInf, 100}, {kInf, kInf, std::cosh(100.0)}},
      {"acosh", {0.5, kInf}, {kNaN, kInf}},        {"atanh", {1, -1, 2}, {kInf, -kInf, kNaN}},
      {"asinh", {kInf, -kInf}, {kInf, -kInf}},
  };
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    for (const Case& c : cases) {
      const Tensor got = RunAndGet(UnaryOp(c.type), {{"x", test::ValuesTensor(c.x, dtype)}}, "out");
      EXPECT_EQ(CompareTensors(got, test::ValuesTensor(c.out, dtype), 0, 1e-6), "")
          << c.type << " " << DataTypeName(dtype);
    }
  }
}

TEST(TrigOpsTest, GradsMatchFiniteDifferences) { test::ExpectGradsMatchFiniteDifferences(Variants()); }

TEST(TrigOpsTest, RegistryEntries) {
  const std::set<std::string> ew_grads = {"tan", "asin", "acos", "atan", "asinh", "acosh", "atanh"};
  for (const UnaryVariant& v : Variants()) {
    const OpInfo& info = OpRegistry::Global().Get(v.type);
    EXPECT_EQ(info.jit, JitLowering::kFramework) << v.type;
    EXPECT_FALSE(info.elementwise) << v.type;
    EXPECT_NE(info.doc.find("JIT: framework"), std::string::npos) << info.doc;
    const proto::OpDesc g = info.grad_maker(UnaryOp(v.type))[0];
    EXPECT_EQ(g.type(), v.type + "_grad");
    // Every grad reads X and Out@GRAD, except tan's, which reads Out.
    EXPECT_EQ(InputArgs(g, v.type == "tan" ? "Out" : "X").size(), 1u) << v.type;
    const OpInfo& grad = OpRegistry::Global().Get(v.type + "_grad");
    const bool ew = ew_grads.count(v.type) > 0;
    EXPECT_EQ(grad.jit, ew ? JitLowering::kElementwise : JitLowering::kFramework) << v.type;
    EXPECT_EQ(static_cast<bool>(grad.elementwise), ew) << v.type;
    EXPECT_NE(grad.doc.find("Gradient of " + v.type), std::string::npos) << grad.doc;
  }
}

TEST(TrigOpsTest, ErrorsNameTheOpAndTheProblem) {
  std::string e = ErrorOf([] { test::RunOp(UnaryOp("sin"), {{"x", test::Int64Tensor({2}, {1, 2})}}); });
  EXPECT_NE(e.find("sin"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
  // The grad checks Out@GRAD against X.
  e = ErrorOf([] {
    const proto::OpDesc g = OpRegistry::Global().Get("atan").grad_maker(UnaryOp("atan"))[0];
    test::RunOp(g, {{"x", FloatTensor({2}, {1, 2})}, {"out@GRAD", FloatTensor({3}, {1, 2, 3})}});
  });
  EXPECT_NE(e.find("atan_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("input Out@GRAD: expected dims [2] (as X), got [3]"), std::string::npos) << e;
}

// ---- the JIT ------------------------------------------------------------------------

// The elementwise grads: one generated kernel each, against the reference.
TEST(TrigOpsJitTest, ElementwiseGradsMatchTheReferenceOnBothIsas) {
  const std::vector<Isa> isas = test::TestedIsas();
  ASSERT_FALSE(isas.empty());
  std::mt19937 rng(4);
  for (Isa isa : isas) {
    for (const UnaryVariant& v : ElementwiseGrads()) {
      for (const Dims& dims : {Dims{1}, Dims{15}, Dims{16}, Dims{17}, Dims{4099}, Dims{3, 5, 7}}) {
        test::ExpectGeneratedKernelMatches(v, test::DrawVariant(v, dims, DataType::kFP32, rng), isa, true, 2e-6,
                                           2e-5);
      }
    }
  }
}

// A forward (kFramework) runs its framework kernel inside the cluster, next
// to its generated grad: the values are the reference kernels'.
TEST(TrigOpsJitTest, FrameworkForwardRunsInsideTheCluster) {
  for (const UnaryVariant& v : Variants()) {
    test::LoweringCase c;
    c.name = v.type;
    c.ops = {UnaryOp(v.type), OpRegistry::Global().Get(v.type).grad_maker(UnaryOp(v.type))[0]};
    c.inputs = {{"x", {33}}, {"out@GRAD", {33}}};
    c.outputs = {"out", "x@GRAD"};
    std::mt19937 rng(5);
    c.given["x"] = test::DrawVariant(v, {33}, DataType::kFP32, rng);
    const auto obj = test::CheckLoweringNumerics(c, 2e-6, 2e-5);
    ASSERT_EQ(obj->program.instructions.size(), 2u) << obj->Listing();
    EXPECT_EQ(obj->program.instructions[0].kernel->name(), v.type) << obj->Listing();
  }
}

}  // namespace
}  // namespace kiln
