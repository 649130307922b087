// log, sqrt, rsqrt, abs, pow, leaky_relu, softplus: hand-computed values,
// values against the <cmath> formulas in f32 and f64, torch.pow's cases of
// pow (negative X, integer and fractional factors), special values, grads by
// finite differences, the registry entries, errors, and the JIT's generated
// kernels (forward and grad) against the reference kernels on the AVX-512 and
// AVX2 paths at sizes around the vector widths and a rank-3 odd shape.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/isa.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::RunAndGet;
using test::ValueAt;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

proto::OpDesc Unary(const std::string& type, const AttrMap& attrs = {}) {
  OpBuilder b(type);
  b.In("X", {"x"}).Out("Out", {"out"});
  for (const auto& [k, v] : attrs) b.Attr(k, v);
  return b.Build();
}

// An op with attrs, the textbook formula in double, and the range of X its
// tests draw from (|X| in [lo, hi], of both signs when `signed_x`), kept
// away from kinks and jumps: abs and leaky_relu at 0, negative powers at 0,
// softplus at its threshold (checked separately).
struct Variant {
  std::string type;
  AttrMap attrs;
  std::function<double(double)> f;
  double lo, hi;
  bool signed_x;
};

double Softplus(double x, double beta, double threshold) {
  return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}

std::vector<Variant> Variants() {
  return {
      {"log", {}, [](double x) { return std::log(x); }, 0.05, 6, false},
      {"sqrt", {}, [](double x) { return std::sqrt(x); }, 0.05, 6, false},
      {"rsqrt", {}, [](double x) { return 1 / std::sqrt(x); }, 0.05, 6, false},
      {"abs", {}, [](double x) { return std::fabs(x); }, 0.01, 3, true},
      {"pow", {}, [](double x) { return x; }, 0.01, 3, true},
      {"pow", {{"factor", 0.0f}}, [](double) { return 1.0; }, 0.01, 3, true},
      {"pow", {{"factor", 2.0f}}, [](double x) { return x * x; }, 0.01, 3, true},
      {"pow", {{"factor", 3.0f}}, [](double x) { return x * x * x; }, 0.01, 3, true},
      {"pow", {{"factor", 7.0f}}, [](double x) { return std::pow(x, 7); }, 0.2, 2, true},
      {"pow", {{"factor", -1.0f}}, [](double x) { return 1 / x; }, 0.2, 3, true},
      {"pow", {{"factor", -2.0f}}, [](double x) { return 1 / (x * x); }, 0.2, 3, true},
      {"pow", {{"factor", -3.0f}}, [](double x) { return 1 / (x * x * x); }, 0.2, 3, true},
      {"pow", {{"factor", 0.5f}}, [](double x) { return std::sqrt(x); }, 0.05, 6, false},
      {"pow", {{"factor", -0.5f}}, [](double x) { return 1 / std::sqrt(x); }, 0.05, 6, false},
      {"pow", {{"factor", 1.5f}}, [](double x) { return std::pow(x, 1.5); }, 0.05, 6, false},
      {"pow", {{"factor", -0.7f}}, [](double x) { return std::pow(x, -0.7f); }, 0.05, 6, false},
      {"leaky_relu", {}, [](double x) { return x > 0 ? x : 0.02f * x; }, 0.01, 3, true},
      {"leaky_relu", {{"alpha", 0.3f}}, [](double x) { return x > 0 ? x : 0.3f * x; }, 0.01, 3, true},
      {"softplus", {}, [](double x) { return Softplus(x, 1, 20); }, 0.0, 8, true},
      {"softplus", {{"beta", 2.0f}, {"threshold", 3.0f}}, [](double x) { return Softplus(x, 2, 3); }, 0.0, 1.4, true},
      {"softplus", {{"beta", -0.5f}}, [](double x) { return Softplus(x, -0.5, 20); }, 0.0, 8, true},
  };
}

std::string Name(const Variant& v) {
  std::string s = v.type;
  for (const auto& [k, a] : v.attrs) s += " " + k + "=" + AttrToString(a);
  return s;
}

Tensor Draw(const Variant& v, const Dims& dims, DataType dtype, std::mt19937& rng) {
  Tensor t(dtype, dims);
  std::uniform_real_distribution<double> mag(v.lo, v.hi);
  std::bernoulli_distribution negative(v.signed_x ? 0.5 : 0.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = negative(rng) ? -mag(rng) : mag(rng);
    if (dtype == DataType::kFP32) {
      t.mutable_data<float>()[i] = static_cast<float>(x);
    } else {
      t.mutable_data<double>()[i] = x;
    }
  }
  return t;
}

TEST(MathOpsTest, HandComputedValues) {
  struct Want {
    std::string type;
    AttrMap attrs;
    std::vector<float> x, out;
  };
  const std::vector<Want> wants = {
      {"log", {}, {1.0f, 2.718281828f, 0.5f, 10.0f}, {0.0f, 1.0f, -0.69314718056f, 2.302585093f}},
      {"sqrt", {}, {4.0f, 2.0f, 0.25f, 0.0f}, {2.0f, 1.41421356237f, 0.5f, 0.0f}},
      {"rsqrt", {}, {4.0f, 0.25f, 1.0f, 100.0f}, {0.5f, 2.0f, 1.0f, 0.1f}},
      {"abs", {}, {-1.5f, 0.0f, 2.0f, -0.0f}, {1.5f, 0.0f, 2.0f, 0.0f}},
      {"pow", {{"factor", 3.0f}}, {-2.0f, 0.5f, 3.0f, -1.0f}, {-8.0f, 0.125f, 27.0f, -1.0f}},
      {"pow", {{"factor", -2.0f}}, {-2.0f, 0.5f, 3.0f, -1.0f}, {0.25f, 4.0f, 0.11111111f, 1.0f}},
      {"pow", {{"factor", 2.5f}}, {4.0f, 1.0f, 0.0f, 9.0f}, {32.0f, 1.0f, 0.0f, 243.0f}},
      {"leaky_relu", {}, {-2.0f, 0.0f, 3.0f, -0.5f}, {-0.04f, 0.0f, 3.0f, -0.01f}},
      {"leaky_relu", {{"alpha", 0.1f}}, {-2.0f, 0.0f, 3.0f, -0.5f}, {-0.2f, 0.0f, 3.0f, -0.05f}},
      {"softplus", {}, {0.0f, 1.0f, -1.0f, 30.0f}, {0.69314718056f, 1.31326168752f, 0.31326168752f, 30.0f}},
  };
  for (const Want& w : wants) {
    const Tensor got = RunAndGet(Unary(w.type, w.attrs), {{"x", FloatTensor({4}, w.x)}}, "out");
    EXPECT_EQ(CompareTensors(got, FloatTensor({4}, w.out), 1e-7, 1e-6), "") << w.type;
  }
}

TEST(MathOpsTest, MatchFormulasAtSeveralSizesInF32AndF64) {
  std::mt19937 rng(1);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const double tol = dtype == DataType::kFP32 ? 2e-6 : 1e-13;
    for (int64_t n : {1, 7, 17, 33}) {
      for (const Variant& v : Variants()) {
        const Tensor x = Draw(v, {n}, dtype, rng);
        const Tensor got = RunAndGet(Unary(v.type, v.attrs), {{"x", x}}, "out");
        Tensor want(dtype, {n});
        for (int64_t i = 0; i < n; ++i) {
          const double y = v.f(ValueAt(x, i));
          if (dtype == DataType::kFP32) {
            want.mutable_data<float>()[i] = static_cast<float>(y);
          } else {
            want.mutable_data<double>()[i] = y;
          }
        }
        EXPECT_EQ(got.dtype(), dtype);
        EXPECT_EQ(CompareTensors(got, want, tol, tol), "") << Name(v) << " n=" << n;
      }
    }
  }
}

// torch.pow's cases and the IEEE special values, in f32 and f64.
TEST(MathOpsTest, SpecialValues) {
  struct Case {
    std::string type;
    AttrMap attrs;
    std::vector<double> x, out;
  };
  const std::vector<Case> cases = {
      {"log", {}, {-1, 0, -0.0, kInf, kNaN, -kInf}, {kNaN, -kInf, -kInf, kInf, kNaN, kNaN}},
      {"sqrt", {}, {-1, 0, kInf, kNaN}, {kNaN, 0, kInf, kNaN}},
      {"rsqrt", {}, {-1, 0, kInf, kNaN}, {kNaN, kInf, 0, kNaN}},
      {"pow", {{"factor", 3.0f}}, {-2, -0.5, kNaN, -kInf}, {-8, -0.125, kNaN, -kInf}},
      {"pow", {{"factor", -3.0f}}, {-2, -0.5, 0, kInf}, {-0.125, -8, kInf, 0}},
      {"pow", {{"factor", 0.0f}}, {kNaN, -3, 0, kInf}, {1, 1, 1, 1}},
      {"pow", {{"factor", 2.5f}}, {-1, -kInf, 0, kInf}, {kNaN, kNaN, 0, kInf}},
      {"pow", {{"factor", 0.5f}}, {-4, -kInf, 0, kInf}, {kNaN, kNaN, 0, kInf}},
      {"pow", {{"factor", -1.5f}}, {-4, 0, kInf, 1}, {kNaN, kInf, 0, 1}},
      {"pow", {{"factor", 1e30f}}, {-1, 0.5, -2, 1}, {1, 0, kInf, 1}},
      {"leaky_relu", {}, {kNaN, -kInf, kInf}, {kNaN, -kInf, kInf}},
      {"softplus", {}, {-100, 1000, kNaN, -kInf, kInf}, {3.720075976020836e-44, 1000, kNaN, 0, kInf}},
      {"abs", {}, {kNaN, -kInf}, {kNaN, kInf}},
  };
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    for (const Case& c : cases) {
      const Dims dims = {static_cast<int64_t>(c.x.size())};
      const Tensor x = test::CastTo(FloatTensor(dims, std::vector<float>(c.x.begin(), c.x.end())), dtype);
      const Tensor want = test::CastTo(FloatTensor(dims, std::vector<float>(c.out.begin(), c.out.end())), dtype);
      // softplus(-100) is 3.7e-44, a subnormal in f32: the absolute tolerance
      // is one f32 subnormal step.
      EXPECT_EQ(CompareTensors(RunAndGet(Unary(c.type, c.attrs), {{"x", x}}, "out"), want, 1.5e-45, 1e-6), "")
          << c.type << " " << DataTypeName(dtype);
    }
  }
}

// The grad of each op at points away from its kinks; abs and leaky_relu at
// 0 and pow's zero factor separately.
TEST(MathOpsTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(2);
  for (const Dims& dims : {Dims{1}, Dims{7}, Dims{17}, Dims{3, 11}}) {
    for (const Variant& v : Variants()) {
      const Tensor x = Draw(v, dims, DataType::kFP64, rng);
      test::GradCheckOptions o;
      o.rtol = 1e-5;
      o.atol = 1e-5;  // 1/x^3 near 0.2 is 125: differences in double are good to ~1e-8 of it
      EXPECT_EQ(CheckGrad(Unary(v.type, v.attrs), {{"x", x}}, {"x"}, {"out"}, o), "") << Name(v) << DimsToString(dims);
    }
  }
}

Tensor GradAt(const std::string& type, const AttrMap& attrs, const std::vector<float>& x,
              const std::vector<float>& dout) {
  const proto::OpDesc g = OpRegistry::Global().Get(type).grad_maker(Unary(type, attrs))[0];
  const Dims dims = {static_cast<int64_t>(x.size())};
  const Tensor xt = FloatTensor(dims, x);
  const Tensor out = RunAndGet(Unary(type, attrs), {{"x", xt}}, "out");
  auto scope = test::RunOp(g, {{"x", xt}, {"out", out}, {"out@GRAD", FloatTensor(dims, dout)}});
  Tensor r;
  r.CopyFrom(scope->GetVar("x@GRAD")->Get());
  return r;
}

TEST(MathOpsTest, GradsAtKinksAndZeroFactor) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // abs: sign(X) * dOut, 0 at X = 0 (both zeros) and for NaN.
  EXPECT_EQ(CompareTensors(GradAt("abs", {}, {-2, 0, -0.0f, 3, nan}, {5, 5, 5, 5, 5}),
                           FloatTensor({5}, {-5, 0, 0, 5, 0}), 0, 0),
            "");
  // leaky_relu: X > 0 picks dOut, X <= 0 alpha * dOut.
  EXPECT_EQ(CompareTensors(GradAt("leaky_relu", {{"alpha", 0.25f}}, {-2, 0, 3}, {4, 4, 4}), FloatTensor({3}, {1, 1, 4}),
                           0, 0),
            "");
  // pow with factor 0: zeros, also at X = 0 where 0 * X^-1 would be NaN.
  EXPECT_EQ(CompareTensors(GradAt("pow", {{"factor", 0.0f}}, {0, -2, 5}, {1, 1, 1}), FloatTensor({3}, {0, 0, 0}), 0, 0),
            "");
  // pow with factor 3 at negative X: 3 X^2 dOut.
  EXPECT_EQ(CompareTensors(GradAt("pow", {{"factor", 3.0f}}, {-2, 0}, {1, 1}), FloatTensor({2}, {12, 0}), 0, 0), "");
  // softplus above its threshold passes dOut through.
  EXPECT_EQ(CompareTensors(GradAt("softplus", {{"threshold", 1.0f}}, {5, 0}, {3, 2}), FloatTensor({2}, {3, 1}), 0, 0),
            "");
}

TEST(MathOpsTest, RegistryEntries) {
  const std::map<std::string, std::vector<std::string>> reads = {
      {"log", {"X", "Out@GRAD"}},      {"sqrt", {"Out", "Out@GRAD"}}, {"rsqrt", {"Out", "Out@GRAD"}},
      {"abs", {"X", "Out@GRAD"}},      {"pow", {"X", "Out@GRAD"}},    {"leaky_relu", {"X", "Out@GRAD"}},
      {"softplus", {"X", "Out@GRAD"}},
  };
  for (const auto& [type, slots] : reads) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_FALSE(info.doc.empty());
    EXPECT_EQ(info.jit, JitLowering::kElementwise) << type;
    ASSERT_EQ(info.inplace.size(), 1u) << type;
    const proto::OpDesc g = info.grad_maker(Unary(type))[0];
    EXPECT_EQ(g.type(), type + "_grad");
    std::vector<std::string> got;
    for (const auto& s : g.inputs()) got.push_back(s.name());
    EXPECT_EQ(got, slots) << type;
    const OpInfo& grad = OpRegistry::Global().Get(type + "_grad");
    EXPECT_EQ(grad.jit, JitLowering::kElementwise) << type;
    EXPECT_NE(grad.doc.find("Gradient of " + type), std::string::npos) << grad.doc;
  }
  EXPECT_FLOAT_EQ(std::get<float>(*OpRegistry::Global().Get("leaky_relu").FindAttr("alpha")->default_value), 0.02f);
  EXPECT_FLOAT_EQ(std::get<float>(*OpRegistry::Global().Get("pow").FindAttr("factor")->default_value), 1.0f);
}

TEST(MathOpsTest, ErrorsNameTheOpAndTheProblem) {
  std::string e = ErrorOf([] { test::RunOp(Unary("log"), {{"x", test::Int64Tensor({2}, {1, 2})}}); });
  EXPECT_NE(e.find("log"), std::string::npos) << e;
  EXPECT_NE(e.find("expected dtype f32 or f64, got i64"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(Unary("softplus", {{"beta", 0.0f}}), {{"x", FloatTensor({1}, {1})}}); });
  EXPECT_NE(e.find("softplus"), std::string::npos) << e;
  EXPECT_NE(e.find("attribute beta: expected a finite nonzero value, got 0"), std::string::npos) << e;
  e = ErrorOf([] {
    test::RunOp(Unary("pow", {{"factor", std::numeric_limits<float>::infinity()}}), {{"x", FloatTensor({1}, {1})}});
  });
  EXPECT_NE(e.find("pow"), std::string::npos) << e;
  EXPECT_NE(e.find("attribute factor: expected a finite value, got inf"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(Unary("pow", {{"factor", int64_t{2}}}), {{"x", FloatTensor({1}, {1})}}); });
  EXPECT_NE(e.find("pow"), std::string::npos) << e;
  EXPECT_NE(e.find("expected type FLOAT"), std::string::npos) << e;
}

// ---- the JIT's generated kernels --------------------------------------------------

std::vector<Isa> TestedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Forward (x -> out) and grad (x, out, dout -> dx) of one variant as a
// one-op cluster: one generated kernel, against the reference kernel.
void CheckJit(const Variant& v, const Dims& dims, Isa isa, bool grad, std::mt19937& rng) {
  SCOPED_TRACE(Name(v) + (grad ? " grad " : " ") + DimsToString(dims) + " " + IsaName(isa));
  test::LoweringCase c;
  c.name = v.type;
  c.options.isa = isa;
  c.given["x"] = Draw(v, dims, DataType::kFP32, rng);
  if (!grad) {
    c.ops = {Unary(v.type, v.attrs)};
    c.inputs = {{"x", dims}};
    c.outputs = {"out"};
  } else {
    c.ops = {OpRegistry::Global().Get(v.type).grad_maker(Unary(v.type, v.attrs))[0]};
    // The grad reads X or Out (from the forward run), and Out@GRAD (random).
    const bool reads_out = !InputArgs(c.ops[0], "Out").empty();
    if (reads_out) {
      c.given["out"] = RunAndGet(Unary(v.type, v.attrs), {{"x", c.given["x"]}}, "out");
      c.inputs = {{"out", dims}, {"out@GRAD", dims}};
    } else {
      c.inputs = {{"x", dims}, {"out@GRAD", dims}};
    }
    c.outputs = {"x@GRAD"};
  }
  const auto obj = test::CheckLoweringNumerics(c, 2e-6, 2e-5, static_cast<unsigned>(Numel(dims)));
  ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
}

TEST(MathOpsJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  const std::vector<Isa> isas = TestedIsas();
  ASSERT_FALSE(isas.empty()) << "this CPU has neither AVX-512 nor AVX2+FMA";
  std::mt19937 rng(3);
  const std::vector<Dims> shapes = {{1}, {15}, {16}, {17}, {4099}, {3, 5, 7}};
  for (Isa isa : isas) {
    for (const Variant& v : Variants()) {
      for (const Dims& dims : shapes) {
        CheckJit(v, dims, isa, /*grad=*/false, rng);
        CheckJit(v, dims, isa, /*grad=*/true, rng);
      }
    }
  }
}

// NaN, infinities, zeros and negative X through the generated code: the same
// special values as the reference kernels.
TEST(MathOpsJitTest, SpecialValuesMatchTheReference) {
  const std::vector<float> specials = {std::numeric_limits<float>::quiet_NaN(),
                                       INFINITY,
                                       -INFINITY,
                                       0.0f,
                                       -0.0f,
                                       -2.0f,
                                       -0.5f,
                                       1.0f,
                                       2.0f,
                                       1e-40f,
                                       -1e-40f,
                                       50.0f,
                                       -100.0f,
                                       3.5f,
                                       -3.0f,
                                       0.5f,
                                       25.0f};
  const Dims dims = {static_cast<int64_t>(specials.size())};
  for (Isa isa : TestedIsas()) {
    for (const Variant& v : Variants()) {
      SCOPED_TRACE(Name(v) + " " + IsaName(isa));
      test::LoweringCase c;
      c.name = v.type;
      c.options.isa = isa;
      c.ops = {Unary(v.type, v.attrs)};
      c.inputs = {{"x", dims}};
      c.outputs = {"out"};
      c.given["x"] = FloatTensor(dims, specials);
      test::CheckLoweringNumerics(c, 2e-6, 2e-5);
    }
  }
}

}  // namespace
}  // namespace kiln
