// slice and its grad: values against element-by-element gathers with numpy's
// slicing (negative and out-of-range bounds), build-time dims with -1,
// gradients against finite differences, and the error messages of bad
// input. concat and split: concat_split_slice_ops_test.
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

// ---- slice -------------------------------------------------------------------------------

proto::OpDesc SliceOp(const std::vector<int64_t>& axes, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& ends, const std::vector<int64_t>& decrease = {}) {
  return OpBuilder("slice")
      .In("Input", {"x"})
      .Out("Out", {"y"})
      .Attr("axes", axes)
      .Attr("starts", starts)
      .Attr("ends", ends)
      .Attr("decrease_axis", decrease)
      .Build();
}

// Python's slice(start, stop).indices(n) for step 1: the first index and the count.
std::pair<int64_t, int64_t> PythonSlice(int64_t start, int64_t stop, int64_t n) {
  auto fix = [n](int64_t v) {
    if (v < 0) v += n;
    return v < 0 ? int64_t{0} : (v > n ? n : v);
  };
  const int64_t s = fix(start), e = fix(stop);
  return {s, e > s ? e - s : 0};
}

// x[slices] element by element.
Tensor GatherSlice(const Tensor& x, const std::vector<int64_t>& axes, const std::vector<int64_t>& starts,
                   const std::vector<int64_t>& ends, Dims* box) {
  *box = x.dims();
  std::vector<int64_t> first(x.rank(), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const size_t a = axes[k] < 0 ? axes[k] + x.rank() : axes[k];
    std::tie(first[a], (*box)[a]) = PythonSlice(starts[k], ends[k], x.dim(a));
  }
  Tensor out(DataType::kFP64, *box);
  ForEachIndex(*box, [&](std::vector<int64_t> idx) {
    const int64_t o = Flat(*box, idx);
    for (size_t d = 0; d < idx.size(); ++d) idx[d] += first[d];
    out.mutable_data<double>()[o] = ValueAt(x, Flat(x.dims(), idx));
  });
  return out;
}

TEST(SliceOpTest, RandomSlicesMatchPythonSemantics) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> rank_d(1, 4), dim_d(1, 6), bound_d(-9, 9), coin(0, 1);
  for (int trial = 0; trial < 300; ++trial) {
    Dims dims(rank_d(rng));
    for (auto& d : dims) d = dim_d(rng);
    std::vector<int64_t> axes, starts, ends;
    for (size_t a = 0; a < dims.size(); ++a) {
      if (coin(rng) == 0) continue;
      // Negative axes count from the end too.
      axes.push_back(coin(rng) ? static_cast<int64_t>(a) : static_cast<int64_t>(a) - static_cast<int64_t>(dims.size()));
      starts.push_back(bound_d(rng));
      ends.push_back(bound_d(rng));
    }
    const DataType dtype = trial % 3 == 0 ? DataType::kFP32 : (trial % 3 == 1 ? DataType::kFP64 : DataType::kINT64);
    const Tensor x = Iota(dims, dtype, -50);
    Dims box;
    const Tensor want = GatherSlice(x, axes, starts, ends, &box);
    const Tensor y = RunOp(SliceOp(axes, starts, ends), {{"x", x}})->GetVar("y")->Get();
    const std::string what = DimsToString(dims) + " axes " + DimsToString(axes) + " starts " + DimsToString(starts) +
                             " ends " + DimsToString(ends);
    ASSERT_EQ(y.dims(), box) << what;
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(ValueAt(y, i), ValueAt(want, i)) << what << " at " << i;
  }
}

TEST(SliceOpTest, NamedCases) {
  const Tensor x = Iota({4, 5}, DataType::kFP32, 0);
  auto dims = [&](const proto::OpDesc& op) { return RunOp(op, {{"x", x}})->GetVar("y")->Get().dims(); };
  EXPECT_EQ(dims(SliceOp({1}, {-3}, {100})), (Dims{4, 3}));              // x[:, -3:]
  EXPECT_EQ(dims(SliceOp({0}, {-100}, {2})), (Dims{2, 5}));              // start clamped to 0
  EXPECT_EQ(dims(SliceOp({0, 1}, {1, 1}, {-1, -1})), (Dims{2, 3}));      // x[1:-1, 1:-1]
  EXPECT_EQ(dims(SliceOp({1}, {3}, {2})), (Dims{4, 0}));                 // end <= start: empty
  EXPECT_EQ(dims(SliceOp({0}, {2}, {3}, {0})), (Dims{5}));               // x[2]
  EXPECT_EQ(dims(SliceOp({0, 1}, {2, -1}, {3, 5}, {0, 1})), (Dims{1}));  // x[2, -1]: all dims dropped
  EXPECT_EQ(dims(SliceOp({}, {}, {})), (Dims{4, 5}));                    // no axes: a copy
  const Tensor y = RunOp(SliceOp({0, 1}, {2, -1}, {3, 5}, {0, 1}), {{"x", x}})->GetVar("y")->Get();
  EXPECT_EQ(ValueAt(y, 0), 14.0);
}

TEST(SliceOpTest, BuildTimeDims) {
  EXPECT_EQ(DimsOf(InferAtBuild(SliceOp({1}, {1}, {-1}), {{"x", {-1, 8}}}), "y"), (Dims{-1, 6}));
  EXPECT_EQ(DimsOf(InferAtBuild(SliceOp({0}, {1}, {3}), {{"x", {-1, 8}}}), "y"), (Dims{-1, 8}));
  EXPECT_EQ(DimsOf(InferAtBuild(SliceOp({0, 1}, {0, 2}, {1, 3}, {1}), {{"x", {-1, 8}}}), "y"), (Dims{-1}));
}

TEST(SliceOpTest, Errors) {
  std::mt19937 rng(6);
  const Tensor x = RandomTensor({4, 5}, DataType::kFP32, rng);
  auto run = [&](const proto::OpDesc& op) { return ErrorOf([&] { RunOp(op, {{"x", x}}); }); };
  std::string msg = run(SliceOp({0, 1}, {0}, {1, 2}));
  EXPECT_NE(msg.find("attributes 'axes' [0,1], 'starts' [0] and 'ends' [1,2] must have the same length"),
            std::string::npos)
      << msg;
  msg = run(SliceOp({2}, {0}, {1}));
  EXPECT_NE(msg.find("attribute 'axes' [2]: entry 2 is out of range for Input [4,5]"), std::string::npos) << msg;
  msg = run(SliceOp({1, -1}, {0, 0}, {1, 1}));
  EXPECT_NE(msg.find("attribute 'axes' [1,-1] names axis 1 twice"), std::string::npos) << msg;
  msg = run(SliceOp({1}, {0}, {2}, {1}));
  EXPECT_NE(msg.find("attribute 'decrease_axis' [1]: dim 1 has size 2 after slicing Input [4,5], expected 1"),
            std::string::npos)
      << msg;
  msg = run(SliceOp({1}, {0}, {1}, {-3}));
  EXPECT_NE(msg.find("attribute 'decrease_axis' [-3]: entry -3 is out of range"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(OpBuilder("slice").In("Input", {"x"}).Out("Out", {"y"}).Build(), {{"x", x}}); });
  EXPECT_NE(msg.find("axes"), std::string::npos) << msg;
}

TEST(SliceOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(7);
  const std::vector<
      std::tuple<Dims, std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>>
      cases = {{{7, 5}, {0}, {1}, {-2}, {}},
               {{3, 7, 5}, {1, 2}, {-4, 0}, {100, 3}, {}},
               {{3, 7, 5}, {0, 2}, {1, -1}, {2, 5}, {0, 2}},
               {{9}, {0}, {-100}, {4}, {}}};
  for (const auto& [dims, axes, starts, ends, decrease] : cases) {
    EXPECT_EQ(CheckGrad(SliceOp(axes, starts, ends, decrease), {{"x", RandomTensor(dims, DataType::kFP64, rng)}}, {"x"},
                        {"y"}),
              "")
        << DimsToString(dims);
  }
  EXPECT_EQ(OpRegistry::Global().Get("slice_grad").no_need_buffer, std::vector<std::string>{"Input"});
}

// The grad places Out@GRAD in the slice of a zero tensor, for any dtype.
TEST(SliceOpTest, GradPlacesOutGradInZeros) {
  const proto::OpDesc g = OpBuilder("slice_grad")
                              .In("Input", {"x"})
                              .In("Out@GRAD", {"dy"})
                              .Out("Input@GRAD", {"dx"})
                              .Attr("axes", std::vector<int64_t>{1})
                              .Attr("starts", std::vector<int64_t>{1})
                              .Attr("ends", std::vector<int64_t>{-1})
                              .Build();
  auto scope = RunOp(g, {{"x", Iota({2, 4}, DataType::kFP32, 0)}, {"dy", test::FloatTensor({2, 2}, {1, 2, 3, 4})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("dx")->Get(), test::FloatTensor({2, 4}, {0, 1, 2, 0, 0, 3, 4, 0}), 0, 0), "");
}

// The grads copy bytes: an out-grad of another dtype than the forward input is refused.

}  // namespace
}  // namespace kiln
