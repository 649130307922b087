// relu, tanh, sigmoid, exp, gelu, scale: hand-computed values, values against
// the <cmath> formulas at several sizes, grads by finite differences, in-place
// execution, missing out-grads and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;
using test::RunAndGet;

using test::CheckGrad;
using test::CompareTensors;
using test::FloatTensor;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

proto::OpDesc Unary(const std::string& type, const AttrMap& attrs = {}, const std::string& out = "out") {
  OpBuilder b(type);
  b.In("X", {"x"}).Out("Out", {out});
  for (const auto& [k, v] : attrs) b.Attr(k, v);
  return b.Build();
}

struct Variant {
  std::string type;
  AttrMap attrs;
  std::function<double(double)> f;  // straightforward formula
};

std::vector<Variant> Variants() {
  const double kPi = 3.14159265358979323846;
  return {
      {"relu", {}, [](double x) { return x > 0 ? x : 0.0; }},
      {"tanh", {}, [](double x) { return std::tanh(x); }},
      {"sigmoid", {}, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      {"exp", {}, [](double x) { return std::exp(x); }},
      {"gelu", {}, [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }},
      {"gelu",
       {{"approximate", true}},
       [kPi](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x))); }},
      {"scale", {}, [](double x) { return x; }},
      {"scale", {{"scale", 2.5f}, {"bias", -0.5f}}, [](double x) { return 2.5 * x - 0.5; }},
      {"scale",
       {{"scale", 2.5f}, {"bias", -0.5f}, {"bias_after_scale", false}},
       [](double x) { return 2.5 * (x - 0.5); }},
  };
}

std::string Name(const Variant& v) {
  std::string s = v.type;
  for (const auto& [k, a] : v.attrs) s += " " + k + "=" + AttrToString(a);
  return s;
}

TEST(ActivationOpsTest, HandComputedValues) {
  const Tensor x = FloatTensor({4}, {-1.0f, 0.0f, 0.5f, 2.0f});
  struct Want {
    std::string type;
    AttrMap attrs;
    std::vector<float> values;
  };
  const std::vector<Want> wants = {
      {"relu", {}, {0.0f, 0.0f, 0.5f, 2.0f}},
      {"tanh", {}, {-0.76159415595576f, 0.0f, 0.46211715726001f, 0.96402758007582f}},
      {"sigmoid", {}, {0.26894142136999f, 0.5f, 0.62245933120185f, 0.88079707797788f}},
      {"exp", {}, {0.36787944117144f, 1.0f, 1.64872127070013f, 7.38905609893065f}},
      {"gelu", {}, {-0.15865525393146f, 0.0f, 0.34573123063701f, 1.95449973610364f}},
      {"gelu", {{"approximate", true}}, {-0.15880800939172f, 0.0f, 0.34571400982514f, 1.95459769408778f}},
      {"scale", {{"scale", 2.0f}, {"bias", 1.0f}}, {-1.0f, 1.0f, 2.0f, 5.0f}},
      {"scale", {{"scale", 2.0f}, {"bias", 1.0f}, {"bias_after_scale", false}}, {0.0f, 2.0f, 3.0f, 6.0f}},
  };
  for (const Want& w : wants) {
    const Tensor got = RunAndGet(Unary(w.type, w.attrs), {{"x", x}}, "out");
    EXPECT_EQ(CompareTensors(got, FloatTensor({4}, w.values), 1e-7, 1e-6), "") << w.type;
  }
}

TEST(ActivationOpsTest, MatchFormulasAtSeveralSizes) {
  std::mt19937 rng(1);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const double tol = dtype == DataType::kFP32 ? 2e-6 : 1e-14;
    for (int64_t n : {1, 7, 17, 33}) {
      for (const Variant& v : Variants()) {
        const Tensor x = RandomTensor({n}, dtype, rng, -4.0, 4.0);
        const Tensor got = RunAndGet(Unary(v.type, v.attrs), {{"x", x}}, "out");
        Tensor want(dtype, {n});
        for (int64_t i = 0; i < n; ++i) {
          const double y = v.f(ValueAt(x, i));
          if (dtype == DataType::kFP32)
            want.mutable_data<float>()[i] = static_cast<float>(y);
          else
            want.mutable_data<double>()[i] = y;
        }
        EXPECT_EQ(got.dtype(), dtype);
        EXPECT_EQ(CompareTensors(got, want, tol, tol), "") << Name(v) << " n=" << n;
      }
    }
  }
}

TEST(ActivationOpsTest, SigmoidIsFiniteForLargeInputs) {
  const Tensor x = FloatTensor({4}, {-100.0f, -30.0f, 30.0f, 100.0f});
  const Tensor got = RunAndGet(Unary("sigmoid"), {{"x", x}}, "out");
  const float* p = got.data<float>();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isfinite(p[i])) << i;
  EXPECT_GE(p[0], 0.0f);
  EXPECT_LT(p[0], 1e-40f);
  EXPECT_NEAR(p[1], 9.357622968839299e-14, 1e-19);
  EXPECT_EQ(p[3], 1.0f);
}

TEST(ActivationOpsTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(2);
  for (const Dims& dims : {Dims{1}, Dims{7}, Dims{17}, Dims{3, 11}}) {
    for (const Variant& v : Variants()) {
      Tensor x = RandomTensor(dims, DataType::kFP64, rng, -3.0, 3.0);
      // relu is not differentiable at 0: keep inputs away from it.
      double* p = x.data<double>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (std::fabs(p[i]) < 1e-3) p[i] = 0.5;
      }
      EXPECT_EQ(CheckGrad(Unary(v.type, v.attrs), {{"x", x}}, {"x"}, {"out"}), "") << Name(v) << DimsToString(dims);
    }
  }
}

TEST(ActivationOpsTest, GradOpsReadTheDocumentedSlots) {
  // relu/tanh/sigmoid/exp read Out (X may have been overwritten in place),
  // gelu reads X, scale reads only Out@GRAD.
  const std::map<std::string, std::vector<std::string>> reads = {
      {"relu", {"Out", "Out@GRAD"}}, {"tanh", {"Out", "Out@GRAD"}}, {"sigmoid", {"Out", "Out@GRAD"}},
      {"exp", {"Out", "Out@GRAD"}},  {"gelu", {"X", "Out@GRAD"}},   {"scale", {"Out@GRAD"}},
  };
  for (const auto& [type, slots] : reads) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_FALSE(info.doc.empty());
    EXPECT_EQ(info.jit, JitLowering::kElementwise) << type;
    ASSERT_EQ(info.inplace.size(), 1u) << type;
    EXPECT_EQ(info.inplace[0], (std::pair<std::string, std::string>{"X", "Out"}));
    const proto::OpDesc g = info.grad_maker(Unary(type))[0];
    EXPECT_EQ(g.type(), type + "_grad");
    std::vector<std::string> got;
    for (const auto& s : g.inputs()) got.push_back(s.name());
    EXPECT_EQ(got, slots) << type;
    EXPECT_EQ(OutputArgs(g, "X@GRAD"), std::vector<std::string>{"x@GRAD"});
    EXPECT_EQ(OpRegistry::Global().Get(type + "_grad").jit, JitLowering::kElementwise);
  }
}

TEST(ActivationOpsTest, ScaleGradIsScaleTimesOutGrad) {
  const proto::OpDesc fwd = Unary("scale", {{"scale", 3.0f}, {"bias", 7.0f}});
  const proto::OpDesc g = OpRegistry::Global().Get("scale").grad_maker(fwd)[0];
  auto scope = RunOp(g, {{"out@GRAD", FloatTensor({3}, {1, -2, 0.5f})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("x@GRAD")->Get(), FloatTensor({3}, {3, -6, 1.5f}), 0, 0), "");
}

TEST(ActivationOpsTest, RunInPlace) {
  std::mt19937 rng(3);
  for (const Variant& v : Variants()) {
    const Tensor x = RandomTensor({33}, DataType::kFP32, rng, -2.0, 2.0);
    const Tensor want = RunAndGet(Unary(v.type, v.attrs), {{"x", x}}, "out");
    const Tensor got = RunAndGet(Unary(v.type, v.attrs, "x"), {{"x", x}}, "x");
    EXPECT_EQ(CompareTensors(got, want, 0, 0), "") << Name(v);
  }
}

TEST(ActivationOpsTest, MissingOutGradGivesZeros) {
  proto::OpDesc g = OpRegistry::Global().Get("relu").grad_maker(Unary("relu"))[0];
  for (auto& s : *g.mutable_inputs()) {
    if (s.name() == "Out@GRAD") s.set_args(0, kEmptyVarName);
  }
  auto scope = RunOp(g, {{"out", FloatTensor({3}, {1, 0, 2})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("x@GRAD")->Get(), FloatTensor({3}, {0, 0, 0}), 0, 0), "");
}

TEST(ActivationOpsTest, BadInputsNameTheOp) {
  std::string e = ErrorOf([] { RunOp(Unary("relu"), {{"x", test::Int64Tensor({2}, {1, 2})}}); });
  EXPECT_NE(e.find("relu"), std::string::npos) << e;
  EXPECT_NE(e.find("expected dtype f32 or f64, got i64"), std::string::npos) << e;
  // Out@GRAD with other dims than Out.
  const proto::OpDesc g = OpRegistry::Global().Get("tanh").grad_maker(Unary("tanh"))[0];
  e = ErrorOf([&] { RunOp(g, {{"out", FloatTensor({3}, {1, 2, 3})}, {"out@GRAD", FloatTensor({2}, {1, 2})}}); });
  EXPECT_NE(e.find("tanh_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("expected dims [3]"), std::string::npos) << e;
  // A float attr given as int.
  e = ErrorOf([] { RunOp(Unary("scale", {{"scale", int64_t{2}}}), {{"x", FloatTensor({1}, {1})}}); });
  EXPECT_NE(e.find("scale"), std::string::npos) << e;
  EXPECT_NE(e.find("expected type FLOAT"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
