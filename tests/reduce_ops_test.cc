// mean, reduce_sum, reduce_mean, sum: hand-computed values, values against a
// direct computation, output shapes (dim, keep_dim, reduce_all), grads by
// finite differences, in-place sum and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
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

proto::OpDesc Reduce(const std::string& type, const std::vector<int64_t>& dim, bool keep_dim = false,
                     bool reduce_all = false) {
  return OpBuilder(type)
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("dim", dim)
      .Attr("keep_dim", keep_dim)
      .Attr("reduce_all", reduce_all)
      .Build();
}

proto::OpDesc Sum(const std::vector<std::string>& xs, const std::string& out = "out") {
  return OpBuilder("sum").In("X", xs).Out("Out", {out}).Build();
}

// Direct reduction: each X element adds into the output element whose
// coordinates are X's with the reduced ones set to 0.
Tensor ExpectedReduce(const Tensor& x, const std::set<int64_t>& reduced, bool mean, const Dims& out_dims) {
  const Dims& xd = x.dims();
  Dims kept = xd;
  int64_t count = 1;
  for (int64_t d : reduced) {
    kept[d] = 1;
    count *= xd[d];
  }
  std::vector<double> acc(static_cast<size_t>(Numel(kept)), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i;
    std::vector<int64_t> idx(xd.size());
    for (size_t d = xd.size(); d-- > 0;) {
      idx[d] = rest % xd[d];
      rest /= xd[d];
    }
    int64_t j = 0;
    for (size_t d = 0; d < xd.size(); ++d) j = j * kept[d] + (reduced.count(d) ? 0 : idx[d]);
    acc[j] += ValueAt(x, i);
  }
  Tensor out(x.dtype(), out_dims);
  for (size_t j = 0; j < acc.size(); ++j) {
    const double v = mean ? acc[j] / static_cast<double>(count) : acc[j];
    if (x.dtype() == DataType::kFP64)
      out.mutable_data<double>()[j] = v;
    else
      out.mutable_data<float>()[j] = static_cast<float>(v);
  }
  return out;
}

TEST(ReduceOpsTest, HandComputedValues) {
  const Tensor x = FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(CompareTensors(RunAndGet(OpBuilder("mean").In("X", {"x"}).Out("Out", {"out"}).Build(), {{"x", x}}, "out"),
                           FloatTensor({1}, {3.5f}), 0, 0),
            "");
  // Default dim [0].
  EXPECT_EQ(
      CompareTensors(RunAndGet(OpBuilder("reduce_sum").In("X", {"x"}).Out("Out", {"out"}).Build(), {{"x", x}}, "out"),
                     FloatTensor({3}, {5, 7, 9}), 0, 0),
      "");
  EXPECT_EQ(CompareTensors(RunAndGet(Reduce("reduce_sum", {1}), {{"x", x}}, "out"), FloatTensor({2}, {6, 15}), 0, 0),
            "");
  EXPECT_EQ(CompareTensors(RunAndGet(Reduce("reduce_mean", {-1}, true), {{"x", x}}, "out"), FloatTensor({2, 1}, {2, 5}),
                           0, 0),
            "");
  EXPECT_EQ(CompareTensors(RunAndGet(Reduce("reduce_sum", {0}, false, true), {{"x", x}}, "out"), FloatTensor({1}, {21}),
                           0, 0),
            "");
  EXPECT_EQ(CompareTensors(RunAndGet(Reduce("reduce_mean", {0, 1}), {{"x", x}}, "out"), FloatTensor({1}, {3.5f}), 0, 0),
            "");
  EXPECT_EQ(CompareTensors(RunAndGet(Reduce("reduce_mean", {0}, true, true), {{"x", x}}, "out"),
                           FloatTensor({1, 1}, {3.5f}), 0, 0),
            "");
  EXPECT_EQ(CompareTensors(RunAndGet(Sum({"a", "b", "c"}),
                                     {{"a", x}, {"b", x}, {"c", FloatTensor({2, 3}, {0, 0, 0, 0, 0, 1})}}, "out"),
                           FloatTensor({2, 3}, {2, 4, 6, 8, 10, 13}), 0, 0),
            "");
}

struct ReduceCase {
  Dims x;
  std::vector<int64_t> dim;
  bool keep_dim;
  bool reduce_all;
  Dims out;
};

std::vector<ReduceCase> ReduceCases() {
  return {
      {{2, 3, 4}, {0}, false, false, {3, 4}},
      {{2, 3, 4}, {1}, false, false, {2, 4}},
      {{2, 3, 4}, {2}, true, false, {2, 3, 1}},
      {{2, 3, 4}, {0, 2}, false, false, {3}},
      {{2, 3, 4}, {-1, -3}, true, false, {1, 3, 1}},
      {{2, 3, 4}, {0, 1, 2}, false, false, {1}},
      {{2, 3, 4}, {1}, false, true, {1}},
      {{2, 3, 4}, {1}, true, true, {1, 1, 1}},
      {{1}, {0}, false, false, {1}},
      {{7}, {0}, false, false, {1}},
      {{17, 3}, {0}, false, false, {3}},
      {{33, 2}, {-1}, true, false, {33, 1}},
      {{4, 1, 5}, {1}, false, false, {4, 5}},
      {{3, 1, 33}, {0, 2}, false, false, {1}},
      {{2, 3, 4, 5}, {1, 3}, false, false, {2, 4}},
  };
}

TEST(ReduceOpsTest, ReduceMatchesDirectComputation) {
  std::mt19937 rng(1);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const double tol = dtype == DataType::kFP32 ? 1e-6 : 1e-13;
    for (const ReduceCase& c : ReduceCases()) {
      std::set<int64_t> reduced;
      for (size_t d = 0; d < c.x.size(); ++d) {
        for (int64_t a : c.dim) {
          if (c.reduce_all || a == static_cast<int64_t>(d) ||
              a + static_cast<int64_t>(c.x.size()) == static_cast<int64_t>(d)) {
            reduced.insert(d);
          }
        }
      }
      for (bool mean : {false, true}) {
        const std::string type = mean ? "reduce_mean" : "reduce_sum";
        const Tensor x = RandomTensor(c.x, dtype, rng);
        const Tensor got = RunAndGet(Reduce(type, c.dim, c.keep_dim, c.reduce_all), {{"x", x}}, "out");
        EXPECT_EQ(got.dims(), c.out) << type << DimsToString(c.x);
        EXPECT_EQ(CompareTensors(got, ExpectedReduce(x, reduced, mean, c.out), tol, tol), "")
            << type << " X" << DimsToString(c.x) << " dim " << AttrToString(c.dim);
      }
    }
  }
}

TEST(ReduceOpsTest, MeanAndSumAtSeveralSizes) {
  std::mt19937 rng(2);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const double tol = dtype == DataType::kFP32 ? 1e-6 : 1e-14;
    for (int64_t n : {1, 7, 17, 33}) {
      const Tensor x = RandomTensor({n, 3}, dtype, rng);
      double total = 0;
      for (int64_t i = 0; i < x.numel(); ++i) total += ValueAt(x, i);
      const Tensor m = RunAndGet(OpBuilder("mean").In("X", {"x"}).Out("Out", {"out"}).Build(), {{"x", x}}, "out");
      EXPECT_EQ(m.dims(), Dims{1});
      EXPECT_NEAR(ValueAt(m, 0), total / static_cast<double>(x.numel()), tol);

      const Tensor a = RandomTensor({n, 3}, dtype, rng);
      const Tensor b = RandomTensor({n, 3}, dtype, rng);
      const Tensor s = RunAndGet(Sum({"x", "a", "b"}), {{"x", x}, {"a", a}, {"b", b}}, "out");
      ASSERT_EQ(s.dims(), x.dims());
      EXPECT_EQ(s.dtype(), dtype);
      for (int64_t i = 0; i < x.numel(); ++i) {
        EXPECT_NEAR(ValueAt(s, i), ValueAt(x, i) + ValueAt(a, i) + ValueAt(b, i), tol) << i;
      }
    }
  }
}

TEST(ReduceOpsTest, SumRunsInPlace) {
  std::mt19937 rng(3);
  const Tensor a = RandomTensor({17}, DataType::kFP32, rng);
  const Tensor b = RandomTensor({17}, DataType::kFP32, rng);
  const Tensor want = RunAndGet(Sum({"a", "b"}), {{"a", a}, {"b", b}}, "out");
  // Out names the first input, then the second.
  EXPECT_EQ(CompareTensors(RunAndGet(Sum({"a", "b"}, "a"), {{"a", a}, {"b", b}}, "a"), want, 0, 0), "");
  EXPECT_EQ(CompareTensors(RunAndGet(Sum({"a", "b"}, "b"), {{"a", a}, {"b", b}}, "b"), want, 0, 0), "");
  const OpInfo& info = OpRegistry::Global().Get("sum");
  ASSERT_EQ(info.inplace.size(), 1u);
  EXPECT_EQ(info.inplace[0], (std::pair<std::string, std::string>{"X", "Out"}));
  EXPECT_TRUE(info.FindInput("X")->duplicable);
}

TEST(ReduceOpsTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(4);
  for (const ReduceCase& c : ReduceCases()) {
    const Tensor x = RandomTensor(c.x, DataType::kFP64, rng);
    for (const char* type : {"reduce_sum", "reduce_mean"}) {
      EXPECT_EQ(CheckGrad(Reduce(type, c.dim, c.keep_dim, c.reduce_all), {{"x", x}}, {"x"}, {"out"}), "")
          << type << " X" << DimsToString(c.x) << " dim " << AttrToString(c.dim);
    }
  }
  for (const Dims& dims : {Dims{1}, Dims{7}, Dims{17, 2}, Dims{33}}) {
    const Tensor x = RandomTensor(dims, DataType::kFP64, rng);
    EXPECT_EQ(CheckGrad(OpBuilder("mean").In("X", {"x"}).Out("Out", {"out"}).Build(), {{"x", x}}, {"x"}, {"out"}), "");
    const Tensor a = RandomTensor(dims, DataType::kFP64, rng);
    const Tensor b = RandomTensor(dims, DataType::kFP64, rng);
    EXPECT_EQ(CheckGrad(Sum({"x", "a", "b"}), {{"x", x}, {"a", a}, {"b", b}}, {"x", "a", "b"}, {"out"}), "");
    // Only some X@GRAD wanted: the others are @EMPTY@.
    EXPECT_EQ(CheckGrad(Sum({"x", "a", "b"}), {{"x", x}, {"a", a}, {"b", b}}, {"a"}, {"out"}), "");
  }
}

TEST(ReduceOpsTest, SumGradCopiesOutGradToEveryInput) {
  const proto::OpDesc g = OpRegistry::Global().Get("sum").grad_maker(Sum({"a", "b"}))[0];
  EXPECT_EQ(g.type(), "sum_grad");
  EXPECT_EQ(OutputArgs(g, "X@GRAD"), (std::vector<std::string>{"a@GRAD", "b@GRAD"}));
  auto scope = RunOp(g, {{"out@GRAD", FloatTensor({2}, {3, -4})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("a@GRAD")->Get(), FloatTensor({2}, {3, -4}), 0, 0), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("b@GRAD")->Get(), FloatTensor({2}, {3, -4}), 0, 0), "");
  EXPECT_TRUE(OpRegistry::Global().Get("sum_grad").FindOutput("X@GRAD")->duplicable);
}

TEST(ReduceOpsTest, MeanGradReadsAScalarSeedOfEitherFloatDtype) {
  // The loss-gradient seed has the loss's declared dtype (here FP32) while X is FP64.
  const proto::OpDesc fwd = OpBuilder("mean").In("X", {"x"}).Out("Out", {"out"}).Build();
  const proto::OpDesc g = OpRegistry::Global().Get("mean").grad_maker(fwd)[0];
  Tensor x(DataType::kFP64, {4});
  for (int i = 0; i < 4; ++i) x.mutable_data<double>()[i] = i;
  auto scope = RunOp(g, {{"x", x}, {"out@GRAD", FloatTensor({1}, {2.0f})}});
  const Tensor& dx = scope->GetVar("x@GRAD")->Get();
  ASSERT_EQ(dx.dtype(), DataType::kFP64);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(dx.data<double>()[i], 0.5);
}

TEST(ReduceOpsTest, RegistryEntries) {
  for (const char* type : {"mean", "reduce_sum", "reduce_mean", "sum"}) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_FALSE(info.doc.empty()) << type;
    EXPECT_EQ(info.jit, JitLowering::kReduction) << type;
    EXPECT_NE(OpRegistry::Global().Find(std::string(type) + "_grad"), nullptr) << type;
  }
  const OpInfo& rs = OpRegistry::Global().Get("reduce_sum");
  EXPECT_EQ(std::get<std::vector<int64_t>>(*rs.FindAttr("dim")->default_value), std::vector<int64_t>{0});
  EXPECT_EQ(std::get<bool>(*rs.FindAttr("keep_dim")->default_value), false);
  EXPECT_EQ(std::get<bool>(*rs.FindAttr("reduce_all")->default_value), false);
}

TEST(ReduceOpsTest, BuildTimeShapeInference) {
  proto::BlockDesc block;
  proto::VarDesc* v = block.add_vars();
  v->set_name("x");
  v->set_dtype(proto::FP32);
  for (int64_t d : {-1, 3, 4}) v->add_dims(d);
  *block.add_ops() = Reduce("reduce_sum", {1});
  InferShapeAtBuild(&block, 0, /*declare_outputs=*/true);
  EXPECT_EQ(VarDims(*FindVarDesc(block, "out")), (Dims{-1, 4}));
}

TEST(ReduceOpsTest, BadInputsNameTheOp) {
  std::mt19937 rng(5);
  const Tensor x = RandomTensor({2, 3}, DataType::kFP32, rng);
  std::string e = ErrorOf([&] { RunOp(Reduce("reduce_sum", {2}), {{"x", x}}); });
  EXPECT_NE(e.find("reduce_sum"), std::string::npos) << e;
  EXPECT_NE(e.find("axis 2 is out of range for rank 2"), std::string::npos) << e;
  e = ErrorOf([&] { RunOp(Reduce("reduce_mean", {-3}), {{"x", x}}); });
  EXPECT_NE(e.find("reduce_mean"), std::string::npos) << e;
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  e = ErrorOf([&] { RunOp(Reduce("reduce_sum", {1, -1}), {{"x", x}}); });
  EXPECT_NE(e.find("reduce_sum"), std::string::npos) << e;
  EXPECT_NE(e.find("twice"), std::string::npos) << e;
  e = ErrorOf([&] { RunOp(Sum({"a", "b"}), {{"a", x}, {"b", RandomTensor({3, 2}, DataType::kFP32, rng)}}); });
  EXPECT_NE(e.find("sum"), std::string::npos) << e;
  EXPECT_NE(e.find("input X[1]: expected dims [2,3]"), std::string::npos) << e;
  e = ErrorOf([&] { RunOp(Sum({"a", "b"}), {{"a", x}, {"b", RandomTensor({2, 3}, DataType::kFP64, rng)}}); });
  EXPECT_NE(e.find("input X[1]: expected dtype f32"), std::string::npos) << e;
  e = ErrorOf([&] {
    RunOp(OpBuilder("mean").In("X", {"x"}).Out("Out", {"out"}).Build(), {{"x", test::Int64Tensor({1}, {1})}});
  });
  EXPECT_NE(e.find("mean"), std::string::npos) << e;
  EXPECT_NE(e.find("expected dtype f32 or f64"), std::string::npos) << e;
  // Out@GRAD of the wrong shape.
  const proto::OpDesc g = OpRegistry::Global().Get("reduce_sum").grad_maker(Reduce("reduce_sum", {1}))[0];
  e = ErrorOf([&] { RunOp(g, {{"x", x}, {"out@GRAD", RandomTensor({3}, DataType::kFP32, rng)}}); });
  EXPECT_NE(e.find("reduce_sum_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("expected dims [2]"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
