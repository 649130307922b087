// sigmoid_cross_entropy_with_logits: the loss against its definition
// -l log(sigmoid(x)) - (1-l) log(1 - sigmoid(x)) in f32 and f64, stability for
// large logits, ignore_index and normalize, NaN, the grad by finite
// differences (Label gets none), errors, and the JIT: a generated kernel on
// the AVX-512 and AVX2 paths at sizes around the vector widths and a rank-3
// odd shape, the framework kernel inside the cluster with normalize.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/isa.h"
#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::RunAndGet;
using test::ValueAt;

const char* const kOp = "sigmoid_cross_entropy_with_logits";

proto::OpDesc Ce(int64_t ignore_index = -100, bool normalize = false) {
  return OpBuilder(kOp)
      .In("X", {"x"})
      .In("Label", {"label"})
      .Out("Out", {"out"})
      .Attr("ignore_index", ignore_index)
      .Attr("normalize", normalize)
      .Build();
}

proto::OpDesc CeGrad(int64_t ignore_index = -100, bool normalize = false) {
  return OpRegistry::Global().Get(kOp).grad_maker(Ce(ignore_index, normalize))[0];
}

// Labels in [0, 1], every `ignore_every`-th one (0: none) set to `ignore`.
Tensor Labels(const Dims& dims, DataType dtype, std::mt19937& rng, int ignore_every = 0, double ignore = -100) {
  Tensor t = test::RandomTensor(dims, dtype, rng, 0.0, 1.0);
  for (int64_t i = 0; ignore_every > 0 && i < t.numel(); i += ignore_every) {
    if (dtype == DataType::kFP32) {
      t.mutable_data<float>()[i] = static_cast<float>(ignore);
    } else {
      t.mutable_data<double>()[i] = ignore;
    }
  }
  return t;
}

// The textbook loss in long double.
double Definition(double x, double l) {
  const long double s = 1.0L / (1.0L + std::exp(-static_cast<long double>(x)));
  return static_cast<double>(-l * std::log(s) - (1 - l) * std::log1p(-s));
}

TEST(SigmoidCeOpTest, MatchesTheDefinitionInF32AndF64) {
  std::mt19937 rng(1);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const double tol = dtype == DataType::kFP32 ? 2e-6 : 1e-12;
    for (const Dims& dims : {Dims{1}, Dims{17}, Dims{4, 9}}) {
      const Tensor x = test::RandomTensor(dims, dtype, rng, -8.0, 8.0);
      const Tensor label = Labels(dims, dtype, rng);
      const Tensor got = RunAndGet(Ce(), {{"x", x}, {"label", label}}, "out");
      ASSERT_EQ(got.dtype(), dtype);
      ASSERT_EQ(got.dims(), dims);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double want = Definition(ValueAt(x, i), ValueAt(label, i));
        EXPECT_NEAR(ValueAt(got, i), want, tol * (1 + std::fabs(want))) << i << " " << DataTypeName(dtype);
      }
    }
  }
}

// Where sigmoid(x) rounds to 0 or 1, the loss keeps its value: x for a wrong
// confident label, e^-|x| for a right one.
TEST(SigmoidCeOpTest, LargeLogitsStayFiniteAndAccurate) {
  const Tensor x = FloatTensor({6}, {100, -100, 100, -100, 30, -1e4f});
  const Tensor label = FloatTensor({6}, {0, 1, 1, 0, 1, 0});
  const Tensor got = RunAndGet(Ce(), {{"x", x}, {"label", label}}, "out");
  EXPECT_FLOAT_EQ(got.data<float>()[0], 100.0f);
  EXPECT_FLOAT_EQ(got.data<float>()[1], 100.0f);
  EXPECT_NEAR(got.data<float>()[2], 3.72e-44, 2e-45);
  EXPECT_NEAR(got.data<float>()[3], 3.72e-44, 2e-45);
  EXPECT_NEAR(got.data<float>()[4], 9.357623e-14, 1e-19);
  EXPECT_EQ(got.data<float>()[5], 0.0f);
}

TEST(SigmoidCeOpTest, IgnoreIndexAndNormalize) {
  const Tensor x = FloatTensor({2, 3}, {1, -2, 0.5f, 3, 0, -1});
  const Tensor label = FloatTensor({2, 3}, {1, -100, 0, 0.25f, -100, 7});
  const Tensor plain = RunAndGet(Ce(), {{"x", x}, {"label", label}}, "out");
  const Tensor normalized = RunAndGet(Ce(-100, true), {{"x", x}, {"label", label}}, "out");
  const Tensor custom = RunAndGet(Ce(7), {{"x", x}, {"label", label}}, "out");
  for (int64_t i = 0; i < 6; ++i) {
    const double l = ValueAt(label, i);
    const double want = l == -100 ? 0.0 : Definition(ValueAt(x, i), l);
    EXPECT_NEAR(ValueAt(plain, i), want, 2e-6) << i;
    EXPECT_NEAR(ValueAt(normalized, i), want / 4, 2e-6) << i;  // 4 labels are not -100
    EXPECT_NEAR(ValueAt(custom, i), l == 7 ? 0.0 : Definition(ValueAt(x, i), l), 2e-5) << i;
  }
  // Every label ignored: zeros, not 0/0.
  const Tensor all = FloatTensor({3}, {-100, -100, -100});
  EXPECT_EQ(CompareTensors(RunAndGet(Ce(-100, true), {{"x", FloatTensor({3}, {1, 2, 3})}, {"label", all}}, "out"),
                           FloatTensor({3}, {0, 0, 0}), 0, 0),
            "");
}

TEST(SigmoidCeOpTest, NaNPropagates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor got =
      RunAndGet(Ce(), {{"x", FloatTensor({3}, {nan, 1, nan})}, {"label", FloatTensor({3}, {1, nan, -100})}}, "out");
  EXPECT_TRUE(std::isnan(got.data<float>()[0]));
  EXPECT_TRUE(std::isnan(got.data<float>()[1]));
  EXPECT_EQ(got.data<float>()[2], 0.0f);  // ignored, whatever X is
}

TEST(SigmoidCeOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  for (bool normalize : {false, true}) {
    for (const Dims& dims : {Dims{1}, Dims{7}, Dims{3, 11}, Dims{2, 3, 5}}) {
      const Tensor x = test::RandomTensor(dims, DataType::kFP64, rng, -5.0, 5.0);
      const Tensor label = Labels(dims, DataType::kFP64, rng, 3);
      EXPECT_EQ(test::CheckGrad(Ce(-100, normalize), {{"x", x}, {"label", label}}, {"x"}, {"out"}), "")
          << DimsToString(dims) << (normalize ? " normalize" : "");
    }
  }
}

TEST(SigmoidCeOpTest, GradFormulaAndRegistryEntry) {
  const OpInfo& info = OpRegistry::Global().Get(kOp);
  EXPECT_EQ(info.no_grad_inputs, std::vector<std::string>{"Label"});
  EXPECT_EQ(info.jit, JitLowering::kElementwise);
  EXPECT_EQ(OpRegistry::Global().Get(std::string(kOp) + "_grad").jit, JitLowering::kElementwise);
  const proto::OpDesc g = CeGrad();
  EXPECT_EQ(OutputArgs(g, "X@GRAD"), std::vector<std::string>{"x@GRAD"});
  EXPECT_TRUE(OutputArgs(g, "Label@GRAD").empty());
  // (sigmoid(x) - label) * dout, 0 where ignored.
  auto scope = test::RunOp(g, {{"x", FloatTensor({3}, {0, 2, 1})},
                               {"label", FloatTensor({3}, {1, 0.5f, -100})},
                               {"out@GRAD", FloatTensor({3}, {2, 3, 4})}});
  const double s2 = 1 / (1 + std::exp(-2.0));
  EXPECT_EQ(CompareTensors(scope->GetVar("x@GRAD")->Get(),
                           FloatTensor({3}, {-1.0f, static_cast<float>((s2 - 0.5) * 3), 0.0f}), 1e-7, 1e-6),
            "");
}

TEST(SigmoidCeOpTest, ErrorsNameTheSlotAndTheProblem) {
  std::string e = ErrorOf([] {
    test::RunOp(Ce(), {{"x", FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6})}, {"label", FloatTensor({3}, {1, 0, 1})}});
  });
  EXPECT_NE(e.find(kOp), std::string::npos) << e;
  EXPECT_NE(e.find("input Label: expected dims [2,3] (as X), got [3]"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(Ce(), {{"x", FloatTensor({2}, {1, 2})}, {"label", test::Int64Tensor({2}, {1, 0})}}); });
  EXPECT_NE(e.find("input Label: expected dtype f32 (as X), got i64"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(Ce(), {{"x", test::Int64Tensor({2}, {1, 2})}, {"label", FloatTensor({2}, {1, 0})}}); });
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
}

// ---- the JIT ----------------------------------------------------------------------

std::vector<Isa> TestedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Forward and grad in one cluster, labels with ignored entries: without
// normalize one generated kernel computes both; with it, both run their
// framework kernels inside the cluster.
void CheckJit(const Dims& dims, Isa isa, bool normalize, std::mt19937& rng) {
  SCOPED_TRACE(DimsToString(dims) + " " + IsaName(isa) + (normalize ? " normalize" : ""));
  test::LoweringCase c;
  c.name = kOp;
  c.options.isa = isa;
  c.ops = {Ce(-100, normalize), CeGrad(-100, normalize)};
  c.inputs = {{"x", dims}, {"label", dims}, {"out@GRAD", dims}};
  c.outputs = {"out", "x@GRAD"};
  c.given["x"] = test::RandomTensor(dims, DataType::kFP32, rng, -12.0, 12.0);
  c.given["label"] = Labels(dims, DataType::kFP32, rng, 5);
  const auto obj = test::CheckLoweringNumerics(c, 2e-6, 2e-5, static_cast<unsigned>(Numel(dims)));
  int generated = 0;
  for (const auto& ins : obj->program.instructions) generated += ins.kernel->name().rfind("ew_", 0) == 0;
  EXPECT_EQ(generated, normalize ? 0 : 1) << obj->Listing();
  EXPECT_EQ(obj->program.instructions.size(), normalize ? 2u : 1u) << obj->Listing();
}

TEST(SigmoidCeJitTest, MatchesTheReferenceOnBothIsas) {
  const std::vector<Isa> isas = TestedIsas();
  ASSERT_FALSE(isas.empty()) << "this CPU has neither AVX-512 nor AVX2+FMA";
  std::mt19937 rng(3);
  for (Isa isa : isas) {
    for (const Dims& dims : {Dims{1}, Dims{15}, Dims{16}, Dims{17}, Dims{4099}, Dims{3, 5, 7}}) {
      CheckJit(dims, isa, /*normalize=*/false, rng);
      CheckJit(dims, isa, /*normalize=*/true, rng);
    }
  }
}

// NaN and infinite logits and labels, ignored labels, through the generated kernel.
TEST(SigmoidCeJitTest, SpecialValuesMatchTheReference) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {nan, 1, INFINITY, -INFINITY, 100, -100, 0, 2, -3, 1e-30f, 40, -40, 5, 6, 7, 8, 9};
  const std::vector<float> ls = {1, nan, 0, 1, 0, 1, -100, -100, 0.5f, 1, 1, 0, INFINITY, 0, 1, 0.5f, -100};
  const Dims dims = {static_cast<int64_t>(xs.size())};
  for (Isa isa : TestedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    test::LoweringCase c;
    c.name = kOp;
    c.options.isa = isa;
    c.ops = {Ce(), CeGrad()};
    c.inputs = {{"x", dims}, {"label", dims}, {"out@GRAD", dims}};
    c.outputs = {"out", "x@GRAD"};
    c.given["x"] = FloatTensor(dims, xs);
    c.given["label"] = FloatTensor(dims, ls);
    test::CheckLoweringNumerics(c, 2e-6, 2e-5);
  }
}

}  // namespace
}  // namespace kiln
