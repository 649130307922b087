// elementwise_add/sub/mul/div: values (hand-computed and against a direct
// broadcast computation), broadcast shapes, grads by finite differences,
// in-place execution, build-time shape inference and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/validate.h"
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

const char* const kOps[] = {"elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"};

double Apply(const std::string& op, double x, double y) {
  if (op == "elementwise_add") return x + y;
  if (op == "elementwise_sub") return x - y;
  if (op == "elementwise_mul") return x * y;
  return x / y;
}

proto::OpDesc MakeOp(const std::string& type, int64_t axis = -1, const std::string& out = "out") {
  OpBuilder b(type);
  b.In("X", {"x"}).In("Y", {"y"}).Out("Out", {out});
  if (axis != -1) b.Attr("axis", axis);
  return b.Build();
}

// Direct broadcast: unravel each X index, take the coordinates Y lines up with
// (from `axis`, or trailing when -1), 0 where Y's dim is 1.
Tensor Expected(const std::string& op, const Tensor& x, const Tensor& y, int64_t axis) {
  const Dims& xd = x.dims();
  const Dims& yd = y.dims();
  const size_t start = axis < 0 ? xd.size() - yd.size() : static_cast<size_t>(axis);
  Tensor out(x.dtype(), xd);
  if (x.dtype() == DataType::kFP64)
    out.mutable_data<double>();
  else
    out.mutable_data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx(xd.size());
    int64_t rest = i;
    for (size_t d = xd.size(); d-- > 0;) {
      idx[d] = rest % xd[d];
      rest /= xd[d];
    }
    int64_t j = 0;
    for (size_t k = 0; k < yd.size(); ++k) j = j * yd[k] + (yd[k] == 1 ? 0 : idx[start + k]);
    const double v = Apply(op, ValueAt(x, i), ValueAt(y, j));
    if (x.dtype() == DataType::kFP64)
      out.data<double>()[i] = v;
    else
      out.data<float>()[i] = static_cast<float>(v);
  }
  return out;
}

struct Case {
  Dims x;
  Dims y;
  int64_t axis;
};

std::vector<Case> BroadcastCases() {
  return {
      {{4, 5}, {5}, -1},   {{2, 3, 4}, {3}, 1},        {{3, 4}, {1, 4}, -1},
      {{6}, {1}, -1},      {{2, 3, 4}, {3, 1}, 1},     {{2, 3, 4}, {2, 1, 4}, -1},
      {{1, 5}, {5}, -1},   {{3, 1, 2}, {1, 1, 2}, -1}, {{2, 3, 4}, {2, 3, 4}, -1},
      {{2, 3, 4}, {2}, 0}, {{2, 3, 4}, {1}, -1},       {{1}, {1}, -1},
      {{7}, {7}, -1},      {{17}, {17}, -1},           {{33}, {33}, -1},
      {{3, 33}, {33}, -1}, {{17, 7}, {17, 1}, -1},     {{2, 3, 4, 5}, {3, 1}, 1},
  };
}

// Keeps divisors away from 0.
Tensor RandomY(const Dims& dims, DataType dtype, std::mt19937& rng, const std::string& op) {
  if (op != "elementwise_div") return RandomTensor(dims, dtype, rng);
  return RandomTensor(dims, dtype, rng, 0.5, 2.0);
}

TEST(ElementwiseOpsTest, HandComputedValues) {
  const Tensor x = FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor y = FloatTensor({3}, {10, 20, 40});
  const std::map<std::string, std::vector<float>> want = {
      {"elementwise_add", {11, 22, 43, 14, 25, 46}},
      {"elementwise_sub", {-9, -18, -37, -6, -15, -34}},
      {"elementwise_mul", {10, 40, 120, 40, 100, 240}},
      {"elementwise_div", {0.1f, 0.1f, 0.075f, 0.4f, 0.25f, 0.15f}},
  };
  for (const auto& [op, values] : want) {
    const Tensor got = RunAndGet(MakeOp(op), {{"x", x}, {"y", y}}, "out");
    EXPECT_EQ(CompareTensors(got, FloatTensor({2, 3}, values), 1e-7, 1e-6), "") << op;
  }
  // axis 0: Y [2] lines up with X's first dim.
  const Tensor y0 = FloatTensor({2}, {100, 200});
  const Tensor got = RunAndGet(MakeOp("elementwise_add", 0), {{"x", x}, {"y", y0}}, "out");
  EXPECT_EQ(CompareTensors(got, FloatTensor({2, 3}, {101, 102, 103, 204, 205, 206}), 0, 0), "");
}

TEST(ElementwiseOpsTest, BroadcastShapesMatchDirectComputation) {
  std::mt19937 rng(1);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const double tol = dtype == DataType::kFP32 ? 1e-6 : 1e-14;
    for (const Case& c : BroadcastCases()) {
      for (const char* op : kOps) {
        const Tensor x = RandomTensor(c.x, dtype, rng);
        const Tensor y = RandomY(c.y, dtype, rng, op);
        const Tensor got = RunAndGet(MakeOp(op, c.axis), {{"x", x}, {"y", y}}, "out");
        EXPECT_EQ(got.dtype(), dtype);
        EXPECT_EQ(CompareTensors(got, Expected(op, x, y, c.axis), tol, tol), "")
            << op << " X" << DimsToString(c.x) << " Y" << DimsToString(c.y) << " axis " << c.axis;
      }
    }
  }
}

TEST(ElementwiseOpsTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(2);
  for (const Case& c : BroadcastCases()) {
    for (const char* op : kOps) {
      const Tensor x = RandomTensor(c.x, DataType::kFP64, rng);
      const Tensor y = RandomY(c.y, DataType::kFP64, rng, op);
      // One input per call: CheckGrad leaves each perturbed element at orig - eps
      // (its perturbed copy shares buffers), which would shift the second input's
      // numeric gradient when it depends on the first input (mul, div).
      for (const char* wrt : {"x", "y"}) {
        EXPECT_EQ(CheckGrad(MakeOp(op, c.axis), {{"x", x}, {"y", y}}, {wrt}, {"out"}), "")
            << op << " X" << DimsToString(c.x) << " Y" << DimsToString(c.y) << " axis " << c.axis << " wrt " << wrt;
      }
    }
  }
}

TEST(ElementwiseOpsTest, BroadcastYGradSumsOverBroadcastDims) {
  // X [3,2], Y [2], Out@GRAD all ones: Y@GRAD sums over the 3 rows.
  const Tensor x = FloatTensor({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor y = FloatTensor({2}, {7, 8});
  const Tensor ones = FloatTensor({3, 2}, {1, 1, 1, 1, 1, 1});
  struct Want {
    std::string op;
    std::vector<float> dx;
    std::vector<float> dy;
  };
  const std::vector<Want> wants = {
      {"elementwise_add", {1, 1, 1, 1, 1, 1}, {3, 3}},
      {"elementwise_sub", {1, 1, 1, 1, 1, 1}, {-3, -3}},
      {"elementwise_mul", {7, 8, 7, 8, 7, 8}, {9, 12}},
      // d(x/y)/dy = -x/y^2: column sums -9/49, -12/64.
      {"elementwise_div", {1 / 7.f, 1 / 8.f, 1 / 7.f, 1 / 8.f, 1 / 7.f, 1 / 8.f}, {-9 / 49.f, -12 / 64.f}},
  };
  for (const Want& w : wants) {
    const proto::OpDesc g = OpRegistry::Global().Get(w.op).grad_maker(MakeOp(w.op))[0];
    auto scope = RunOp(g, {{"x", x}, {"y", y}, {"out@GRAD", ones}});
    EXPECT_EQ(CompareTensors(scope->GetVar("y@GRAD")->Get(), FloatTensor({2}, w.dy), 1e-7, 1e-6), "") << w.op;
    EXPECT_EQ(CompareTensors(scope->GetVar("x@GRAD")->Get(), FloatTensor({3, 2}, w.dx), 1e-7, 1e-6), "") << w.op;
  }
}

TEST(ElementwiseOpsTest, RunsInPlace) {
  std::mt19937 rng(4);
  for (const char* op : kOps) {
    const Tensor x = RandomTensor({3, 17}, DataType::kFP32, rng);
    const Tensor y = RandomY({17}, DataType::kFP32, rng, op);
    const Tensor got = RunAndGet(MakeOp(op, -1, "x"), {{"x", x}, {"y", y}}, "x");
    EXPECT_EQ(CompareTensors(got, Expected(op, x, y, -1), 1e-6, 1e-6), "") << op;
  }
  const OpInfo& add = OpRegistry::Global().Get("elementwise_add");
  ASSERT_EQ(add.inplace.size(), 1u);
  EXPECT_EQ(add.inplace[0], (std::pair<std::string, std::string>{"X", "Out"}));
}

TEST(ElementwiseOpsTest, RegistryEntries) {
  for (const char* op : kOps) {
    const OpInfo& f = OpRegistry::Global().Get(op);
    EXPECT_FALSE(f.doc.empty());
    EXPECT_EQ(f.jit, JitLowering::kElementwise);
    ASSERT_NE(f.FindAttr("axis"), nullptr);
    EXPECT_EQ(std::get<int64_t>(*f.FindAttr("axis")->default_value), -1);
    const OpInfo& g = OpRegistry::Global().Get(std::string(op) + "_grad");
    EXPECT_EQ(g.jit, JitLowering::kElementwise);
    EXPECT_TRUE(g.FindOutput("X@GRAD")->dispensable);
    EXPECT_TRUE(g.FindOutput("Y@GRAD")->dispensable);
  }
}

TEST(ElementwiseOpsTest, BuildTimeShapeInferencePropagatesUnknownDims) {
  proto::BlockDesc block;
  auto add_var = [&](const std::string& name, const Dims& dims) {
    proto::VarDesc* v = block.add_vars();
    v->set_name(name);
    v->set_dtype(proto::FP32);
    for (int64_t d : dims) v->add_dims(d);
  };
  add_var("x", {-1, 5});
  add_var("y", {5});
  *block.add_ops() = MakeOp("elementwise_mul");
  InferShapeAtBuild(&block, 0, /*declare_outputs=*/true);
  const proto::VarDesc* out = FindVarDesc(block, "out");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(VarDims(*out), (Dims{-1, 5}));

  *block.add_ops() = OpRegistry::Global().Get("elementwise_mul").grad_maker(MakeOp("elementwise_mul"))[0];
  add_var("out@GRAD", {-1, 5});
  InferShapeAtBuild(&block, 1, /*declare_outputs=*/true);
  EXPECT_EQ(VarDims(*FindVarDesc(block, "x@GRAD")), (Dims{-1, 5}));
  EXPECT_EQ(VarDims(*FindVarDesc(block, "y@GRAD")), (Dims{5}));
}

TEST(ElementwiseOpsTest, BadInputsNameTheOp) {
  std::mt19937 rng(5);
  const Tensor x = RandomTensor({4, 5}, DataType::kFP32, rng);
  // Y [4] lines up with X's trailing dim 5.
  std::string e = ErrorOf([&] {
    RunOp(MakeOp("elementwise_add"), {{"x", x}, {"y", RandomTensor({4}, DataType::kFP32, rng)}});
  });
  EXPECT_NE(e.find("elementwise_add"), std::string::npos) << e;
  EXPECT_NE(e.find("does not broadcast"), std::string::npos) << e;
  // Y of higher rank than X.
  e = ErrorOf([&] {
    RunOp(MakeOp("elementwise_mul"), {{"x", x}, {"y", RandomTensor({2, 4, 5}, DataType::kFP32, rng)}});
  });
  EXPECT_NE(e.find("elementwise_mul"), std::string::npos) << e;
  EXPECT_NE(e.find("higher rank"), std::string::npos) << e;
  // axis places Y past X's end.
  e = ErrorOf([&] {
    RunOp(MakeOp("elementwise_sub", 1), {{"x", x}, {"y", RandomTensor({5, 1}, DataType::kFP32, rng)}});
  });
  EXPECT_NE(e.find("elementwise_sub"), std::string::npos) << e;
  EXPECT_NE(e.find("outside X"), std::string::npos) << e;
  // Dtypes differ.
  e = ErrorOf([&] { RunOp(MakeOp("elementwise_div"), {{"x", x}, {"y", RandomTensor({5}, DataType::kFP64, rng)}}); });
  EXPECT_NE(e.find("elementwise_div"), std::string::npos) << e;
  EXPECT_NE(e.find("expected dtype f32"), std::string::npos) << e;
  // Integer input.
  e = ErrorOf([&] {
    RunOp(MakeOp("elementwise_add"), {{"x", test::Int64Tensor({2}, {1, 2})}, {"y", test::Int64Tensor({2}, {1, 2})}});
  });
  EXPECT_NE(e.find("expected dtype f32 or f64, got i64"), std::string::npos) << e;
  // Broadcast errors at build time too.
  proto::BlockDesc block;
  for (auto [name, d0] : {std::pair<const char*, int64_t>{"x", 3}, {"y", 4}, {"out", 3}}) {
    proto::VarDesc* v = block.add_vars();
    v->set_name(name);
    v->set_dtype(proto::FP32);
    v->add_dims(d0);
  }
  *block.add_ops() = MakeOp("elementwise_add");
  e = ErrorOf([&] { InferShapeAtBuild(&block, 0, false); });
  EXPECT_NE(e.find("elementwise_add"), std::string::npos) << e;
  EXPECT_NE(e.find("does not broadcast"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
