// concat and split and their grads: values against element-by-element
// gathers written from the definitions, every dtype, build-time dims with
// -1, gradients against finite differences on odd shapes, absent out-grads,
// and the error messages of bad input; what the three ops share (their grads'
// dtype checks, their JIT lowering). slice: slice_op_test.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"
#include "tests/concat_split_slice_test_util.h"

namespace kiln {
namespace {

using namespace concat_split_slice_test;  // the helpers shared by the split files (tests/concat_split_slice_test_util.h)

// ---- concat ------------------------------------------------------------------------------

proto::OpDesc ConcatOp(size_t n, int64_t axis) {
  return OpBuilder("concat").In("X", Names("x", n)).Out("Out", {"y"}).Attr("axis", axis).Build();
}

// Out[idx] = X[k][idx with the axis index shifted] for the k whose range holds it.
double ConcatAt(const std::vector<Tensor>& xs, int64_t axis, std::vector<int64_t> idx) {
  for (const Tensor& x : xs) {
    if (idx[axis] < x.dim(axis)) return ValueAt(x, Flat(x.dims(), idx));
    idx[axis] -= x.dim(axis);
  }
  ADD_FAILURE() << "index past the inputs";
  return 0;
}

TEST(ConcatOpTest, MatchesGatherOnEveryAxisAndDtype) {
  struct Case {
    std::vector<Dims> xs;
    int64_t axis;
    Dims out;
  };
  const std::vector<Case> cases = {{{{3}, {1}, {5}}, 0, {9}},
                                   {{{2, 3}, {4, 3}}, 0, {6, 3}},
                                   {{{2, 3}, {2, 1}, {2, 7}}, 1, {2, 11}},
                                   {{{2, 3}, {2, 1}, {2, 7}}, -1, {2, 11}},
                                   {{{3, 1, 5}, {3, 4, 5}}, -2, {3, 5, 5}},
                                   {{{2, 3, 4, 5}, {2, 3, 4, 2}}, 3, {2, 3, 4, 7}},
                                   {{{1, 17}}, 1, {1, 17}},
                                   {{{2, 3}, {2, 3}, {2, 3}, {2, 3}}, 1, {2, 12}}};
  for (const Case& c : cases) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64, DataType::kINT64}) {
      std::map<std::string, Tensor> in;
      std::vector<Tensor> xs;
      for (size_t k = 0; k < c.xs.size(); ++k) {
        xs.push_back(Iota(c.xs[k], dtype, 1000 * static_cast<int64_t>(k)));
        in["x" + std::to_string(k)] = xs.back();
      }
      const Tensor y = RunOp(ConcatOp(xs.size(), c.axis), in)->GetVar("y")->Get();
      ASSERT_EQ(y.dims(), c.out) << c.axis;
      ASSERT_EQ(y.dtype(), dtype);
      const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.out.size()) : c.axis;
      ForEachIndex(c.out, [&](const std::vector<int64_t>& idx) {
        EXPECT_EQ(ValueAt(y, Flat(c.out, idx)), ConcatAt(xs, axis, idx)) << DimsToString(c.out) << " axis " << c.axis;
      });
    }
  }
}

TEST(ConcatOpTest, BuildTimeDims) {
  const proto::OpDesc op = ConcatOp(2, 1);
  EXPECT_EQ(DimsOf(InferAtBuild(op, {{"x0", {-1, 3}}, {"x1", {-1, 4}}}), "y"), (Dims{-1, 7}));
  EXPECT_EQ(DimsOf(InferAtBuild(op, {{"x0", {2, -1}}, {"x1", {2, 4}}}), "y"), (Dims{2, -1}));
}

TEST(ConcatOpTest, Errors) {
  std::mt19937 rng(1);
  auto run = [&](const proto::OpDesc& op, const std::vector<Tensor>& xs) {
    std::map<std::string, Tensor> in;
    for (size_t k = 0; k < xs.size(); ++k) in["x" + std::to_string(k)] = xs[k];
    return ErrorOf([&] { RunOp(op, in); });
  };
  const Tensor a = RandomTensor({2, 3}, DataType::kFP32, rng);
  std::string msg = run(ConcatOp(3, 1), {a, a, RandomTensor({3, 3}, DataType::kFP32, rng)});
  EXPECT_NE(msg.find("input X[2]: expected dims [2,3] (those of X[0]) except on axis 1, got [3,3]"), std::string::npos)
      << msg;
  msg = run(ConcatOp(2, 0), {a, RandomTensor({2, 3, 1}, DataType::kFP32, rng)});
  EXPECT_NE(msg.find("input X[1]: expected dims [2,3] (those of X[0]) except on axis 0, got [2,3,1]"),
            std::string::npos)
      << msg;
  msg = run(ConcatOp(2, 2), {a, a});
  EXPECT_NE(msg.find("axis 2 is out of range for rank 2"), std::string::npos) << msg;
  msg = run(ConcatOp(2, 0), {a, RandomTensor({2, 3}, DataType::kFP64, rng)});
  EXPECT_NE(msg.find("input X[1]: expected dtype f32 (as X[0]), got f64"), std::string::npos) << msg;
  msg = ErrorOf([] { RunOp(OpBuilder("concat").Out("Out", {"y"}).Build(), {}); });
  EXPECT_NE(msg.find("missing input slot 'X'"), std::string::npos) << msg;
  msg = ErrorOf([&] {
    RunOp(OpBuilder("concat").In("X", {"x0", kEmptyVarName}).Out("Out", {"y"}).Build(), {{"x0", a}});
  });
  EXPECT_NE(msg.find("input X[1] is @EMPTY@"), std::string::npos) << msg;
}

TEST(ConcatOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  const std::vector<std::pair<std::vector<Dims>, int64_t>> cases = {
      {{{3, 5}, {1, 5}, {4, 5}}, 0}, {{{2, 3, 5}, {2, 1, 5}}, 1}, {{{7}, {9}}, -1}, {{{3, 2, 3}, {3, 2, 1}}, -1}};
  for (const auto& [dims, axis] : cases) {
    std::map<std::string, Tensor> in;
    for (size_t k = 0; k < dims.size(); ++k) in["x" + std::to_string(k)] = RandomTensor(dims[k], DataType::kFP64, rng);
    EXPECT_EQ(CheckGrad(ConcatOp(dims.size(), axis), in, Names("x", dims.size()), {"y"}), "") << axis;
    // Only some inputs want a gradient: the others are @EMPTY@.
    EXPECT_EQ(CheckGrad(ConcatOp(dims.size(), axis), in, {"x1"}, {"y"}), "") << axis;
  }
}

// concat_grad reads X only for its dims: X's buffers may be released.
TEST(ConcatOpTest, GradReadsXOnlyForItsDimsAndZerosWithoutOutGrad) {
  const OpInfo& info = OpRegistry::Global().Get("concat_grad");
  EXPECT_EQ(info.no_need_buffer, std::vector<std::string>{"X"});
  const proto::OpDesc g =
      OpBuilder("concat_grad").In("X", {"a", "b"}).Out("X@GRAD", {"da", "db"}).Attr("axis", int64_t{0}).Build();
  auto scope = RunOp(g, {{"a", Iota({2, 3}, DataType::kFP32, 1)}, {"b", Iota({1, 3}, DataType::kFP32, 1)}});
  EXPECT_EQ(CompareTensors(scope->GetVar("db")->Get(), test::FloatTensor({1, 3}, {0, 0, 0}), 0, 0), "");
  EXPECT_EQ(scope->GetVar("da")->Get().dims(), (Dims{2, 3}));
}

// ---- split -------------------------------------------------------------------------------

proto::OpDesc SplitOp(size_t n, int64_t axis, int64_t num, const std::vector<int64_t>& sections) {
  return OpBuilder("split")
      .In("X", {"x"})
      .Out("Out", Names("o", n))
      .Attr("axis", axis)
      .Attr("num", num)
      .Attr("sections", sections)
      .Build();
}

TEST(SplitOpTest, NumAndSectionsMatchGather) {
  struct Case {
    Dims x;
    int64_t axis, num;
    std::vector<int64_t> sections;
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {{{6}, 0, 3, {}, {2, 2, 2}},         {{4, 9}, 1, 3, {}, {3, 3, 3}},
                                   {{4, 9}, -1, 0, {2, 7}, {2, 7}},    {{4, 9}, -1, 0, {2, -1, 3}, {2, 4, 3}},
                                   {{5, 2, 3}, 0, 0, {-1, 1}, {4, 1}}, {{3, 8, 5}, 1, 0, {1, 0, 7}, {1, 0, 7}},
                                   {{2, 3, 4}, 2, 1, {}, {4}}};
  for (const Case& c : cases) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64, DataType::kINT64}) {
      const Tensor x = Iota(c.x, dtype, 7);
      auto scope = RunOp(SplitOp(c.sizes.size(), c.axis, c.num, c.sections), {{"x", x}});
      const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.x.size()) : c.axis;
      int64_t offset = 0;
      for (size_t k = 0; k < c.sizes.size(); ++k) {
        const Tensor& o = scope->GetVar("o" + std::to_string(k))->Get();
        Dims want = c.x;
        want[axis] = c.sizes[k];
        ASSERT_EQ(o.dims(), want) << "part " << k;
        ForEachIndex(want, [&](std::vector<int64_t> idx) {
          const double got = ValueAt(o, Flat(want, idx));
          idx[axis] += offset;
          EXPECT_EQ(got, ValueAt(x, Flat(c.x, idx))) << DimsToString(c.x) << " part " << k;
        });
        offset += c.sizes[k];
      }
    }
  }
}

TEST(SplitOpTest, BuildTimeDims) {
  proto::BlockDesc b = InferAtBuild(SplitOp(2, 1, 2, {}), {{"x", {-1, 6}}});
  EXPECT_EQ(DimsOf(b, "o0"), (Dims{-1, 3}));
  b = InferAtBuild(SplitOp(3, 0, 0, {2, -1, 1}), {{"x", {-1, 6}}});
  EXPECT_EQ(DimsOf(b, "o0"), (Dims{2, 6}));
  EXPECT_EQ(DimsOf(b, "o1"), (Dims{-1, 6}));
  EXPECT_EQ(DimsOf(b, "o2"), (Dims{1, 6}));
}

TEST(SplitOpTest, Errors) {
  std::mt19937 rng(3);
  const Tensor x = RandomTensor({4, 9}, DataType::kFP32, rng);
  auto run = [&](const proto::OpDesc& op) { return ErrorOf([&] { RunOp(op, {{"x", x}}); }); };
  std::string msg = run(SplitOp(2, 1, 2, {}));
  EXPECT_NE(msg.find("input X [4,9]: dim 9 on axis 1 does not split into 2 equal parts"), std::string::npos) << msg;
  msg = run(SplitOp(2, 1, 0, {2, 3}));
  EXPECT_NE(msg.find("attribute 'sections' [2,3] sums to 5, input X [4,9] has 9 on axis 1"), std::string::npos) << msg;
  msg = run(SplitOp(2, 1, 0, {10, -1}));
  EXPECT_NE(msg.find("sums to 10 (without the -1), input X [4,9] has 9 on axis 1"), std::string::npos) << msg;
  msg = run(SplitOp(2, 1, 0, {-1, -1}));
  EXPECT_NE(msg.find("attribute 'sections' [-1,-1] has more than one -1"), std::string::npos) << msg;
  msg = run(SplitOp(2, 1, 0, {-2, 11}));
  EXPECT_NE(msg.find("entry 0 is -2"), std::string::npos) << msg;
  msg = run(SplitOp(3, 0, 2, {}));
  EXPECT_NE(msg.find("slot Out: expected 2 args (num), got 3"), std::string::npos) << msg;
  msg = run(SplitOp(2, 0, 2, {2, 2}));
  EXPECT_NE(msg.find("attributes 'num' (2) and 'sections' [2,2] are both set"), std::string::npos) << msg;
  msg = run(SplitOp(2, 0, 0, {}));
  EXPECT_NE(msg.find("set attribute 'num'"), std::string::npos) << msg;
  msg = run(SplitOp(2, 2, 2, {}));
  EXPECT_NE(msg.find("axis 2 is out of range for rank 2"), std::string::npos) << msg;
}

TEST(SplitOpTest, GradMatchesFiniteDifferencesWithAbsentOutGrads) {
  std::mt19937 rng(4);
  const std::vector<std::tuple<Dims, int64_t, int64_t, std::vector<int64_t>, size_t>> cases = {
      {{9, 5}, 0, 3, {}, 3}, {{3, 7, 2}, 1, 0, {2, -1, 1}, 3}, {{5, 3}, -1, 0, {1, 2}, 2}};
  for (const auto& [dims, axis, num, sections, n] : cases) {
    const proto::OpDesc op = SplitOp(n, axis, num, sections);
    const std::map<std::string, Tensor> in = {{"x", RandomTensor(dims, DataType::kFP64, rng)}};
    EXPECT_EQ(CheckGrad(op, in, {"x"}, Names("o", n)), "") << DimsToString(dims);
    // Only the last part feeds the loss: the other out-grads are @EMPTY@ (zeros).
    EXPECT_EQ(CheckGrad(op, in, {"x"}, {"o" + std::to_string(n - 1)}), "") << DimsToString(dims);
  }
}

TEST(SplitOpTest, GradOfNoOutGradIsZeros) {
  const proto::OpDesc g = OpBuilder("split_grad")
                              .In("X", {"x"})
                              .In("Out@GRAD", {kEmptyVarName, kEmptyVarName})
                              .Out("X@GRAD", {"dx"})
                              .Attr("num", int64_t{2})
                              .Build();
  auto scope = RunOp(g, {{"x", Iota({2, 2}, DataType::kFP32, 3)}});
  EXPECT_EQ(CompareTensors(scope->GetVar("dx")->Get(), test::FloatTensor({2, 2}, {0, 0, 0, 0}), 0, 0), "");
  EXPECT_EQ(OpRegistry::Global().Get("split_grad").no_need_buffer, std::vector<std::string>{"X"});
}

TEST(ConcatSplitSliceTest, GradsRefuseOutGradsOfAnotherDtype) {
  const Tensor x = Iota({2, 4}, DataType::kFP32, 0);
  const Tensor g = Iota({2, 4}, DataType::kFP64, 0);
  std::string msg = ErrorOf([&] {
    RunOp(OpBuilder("concat_grad").In("X", {"x"}).In("Out@GRAD", {"g"}).Out("X@GRAD", {"dx"}).Build(),
          {{"x", x}, {"g", g}});
  });
  EXPECT_NE(msg.find("input Out@GRAD: expected dtype f32 (as X), got f64"), std::string::npos) << msg;
  msg = ErrorOf([&] {
    RunOp(OpBuilder("split_grad")
              .In("X", {"x"})
              .In("Out@GRAD", {"g0", "g1"})
              .Out("X@GRAD", {"dx"})
              .Attr("num", int64_t{2})
              .Build(),
          {{"x", x}, {"g0", Iota({1, 4}, DataType::kFP32, 0)}, {"g1", Iota({1, 4}, DataType::kFP64, 0)}});
  });
  EXPECT_NE(msg.find("input Out@GRAD[1]: expected dtype f32 (as X), got f64"), std::string::npos) << msg;
  msg = ErrorOf([&] {
    RunOp(OpBuilder("slice_grad")
              .In("Input", {"x"})
              .In("Out@GRAD", {"g"})
              .Out("Input@GRAD", {"dx"})
              .Attr("axes", std::vector<int64_t>{})
              .Attr("starts", std::vector<int64_t>{})
              .Attr("ends", std::vector<int64_t>{})
              .Build(),
          {{"x", x}, {"g", g}});
  });
  EXPECT_NE(msg.find("input Out@GRAD: expected dtype f32 (as Input), got f64"), std::string::npos) << msg;
}

TEST(ConcatSplitSliceTest, AreLayoutOpsForTheJit) {
  for (const char* type : {"concat", "concat_grad", "split", "split_grad", "slice", "slice_grad"}) {
    EXPECT_EQ(OpRegistry::Global().Get(type).jit, JitLowering::kLayout) << type;
  }
}

}  // namespace
}  // namespace kiln
