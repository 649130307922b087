// The fused elementwise kernel IR: layout collapsing, printing, validation and
// the reference interpreter.
#include "framework/ew/ew_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/error.h"

namespace kiln::jit {
namespace {

std::vector<int64_t> StridesOf(const EwLayout& l, const EwOperand& op) {
  return std::vector<int64_t>(op.strides.begin(), op.strides.begin() + l.rank);
}
std::vector<int64_t> DimsOf(const EwLayout& l) { return std::vector<int64_t>(l.dims.begin(), l.dims.begin() + l.rank); }

TEST(EwLayoutTest, RowBroadcastCollapsesToTwoDims) {
  // X [8,4,16] + Y [16] (axis -1): Y padded to [1,1,16].
  const EwLayout l = CollapseLayout({8, 4, 16}, {{8, 4, 16}, {1, 1, 16}}, {{8, 4, 16}, {1, 1, 16}});
  EXPECT_EQ(DimsOf(l), (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(StridesOf(l, l.inputs[0]), (std::vector<int64_t>{16, 1}));
  EXPECT_EQ(StridesOf(l, l.inputs[1]), (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(l.IsReduction(0));
  EXPECT_TRUE(l.IsReduction(1));
  EXPECT_FALSE(l.IsInnerReduction(1));
  EXPECT_EQ(l.OutputExtent(1), 16);
  EXPECT_EQ(l.ToString(), "dims=[32,16] in0=[16,1] in1=[0,1] out0=[16,1] out1=[0,1]+");
}

TEST(EwLayoutTest, ChannelBroadcastKeepsThreeDims) {
  // X [2,5,3,7] + Y [5] with axis 1: Y padded to [1,5,1,1]; H and W merge.
  const EwLayout l = CollapseLayout({2, 5, 3, 7}, {{2, 5, 3, 7}, {1, 5, 1, 1}}, {{1, 5, 1, 1}});
  EXPECT_EQ(DimsOf(l), (std::vector<int64_t>{2, 5, 21}));
  EXPECT_EQ(StridesOf(l, l.inputs[0]), (std::vector<int64_t>{105, 21, 1}));
  EXPECT_EQ(StridesOf(l, l.inputs[1]), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_TRUE(l.IsInnerReduction(0));
  EXPECT_EQ(l.OutputExtent(0), 5);
}

TEST(EwLayoutTest, SameShapesMergeToOneDimAndOnesAreDropped) {
  const EwLayout l = CollapseLayout({3, 1, 4, 5}, {{3, 1, 4, 5}, {1, 1, 1, 1}}, {{3, 1, 4, 5}, {1, 1, 1, 1}});
  EXPECT_EQ(DimsOf(l), (std::vector<int64_t>{60}));
  EXPECT_EQ(StridesOf(l, l.inputs[1]), (std::vector<int64_t>{0}));
  EXPECT_TRUE(l.IsInnerReduction(1));
  EXPECT_EQ(l.OutputExtent(1), 1);
  const EwLayout one = CollapseLayout({1, 1}, {{1, 1}}, {{1, 1}});
  EXPECT_EQ(one.rank, 1);
  EXPECT_EQ(one.numel(), 1);
}

TEST(EwLayoutTest, TooManyDimsIsUnimplemented) {
  try {
    CollapseLayout({2, 3, 4, 5, 6}, {{2, 3, 4, 5, 6}, {2, 1, 4, 1, 6}, {1, 3, 1, 5, 1}}, {{2, 3, 4, 5, 6}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("collapse to 5 dims"), std::string::npos) << e.what();
  }
}

TEST(EwLayoutTest, OperandThatDoesNotBroadcastIsRejected) {
  try {
    CollapseLayout({4, 6}, {{4, 6}, {1, 5}}, {{4, 6}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("input 1 dims [1,5] do not broadcast to iteration dims [4,6]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(CollapseLayout({4, 6}, {{6}}, {{4, 6}}), Error);
}

TEST(EwLayoutTest, ValidateRejectsBadStrides) {
  EwLayout l;
  l.rank = 1;
  l.dims[0] = 8;
  l.inputs.resize(1);
  l.inputs[0].strides[0] = 2;
  l.outputs.resize(1);
  l.outputs[0].strides[0] = 1;
  try {
    l.Validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in0 inner stride must be 0 or 1"), std::string::npos) << e.what();
  }
}

TEST(EwProgramTest, ToStringListsInstructions) {
  EwProgram p;
  const EwValue x = p.Load(0);
  const EwValue y = p.Load(1);
  const EwValue s = p.Fma(x, y, p.Const(0.25f));
  p.Store(0, p.Relu(s));
  EXPECT_EQ(p.ToString(),
            "%0 = load in0\n"
            "%1 = load in1\n"
            "%2 = const 0.25\n"
            "%3 = fma %0, %1, %2\n"
            "%4 = const 0\n"
            "%5 = max %3, %4\n"
            "store out0, %5\n");
}

TEST(EwProgramTest, ValidateNamesTheProblem) {
  EwProgram p;
  const EwValue x = p.Load(2);
  p.Store(0, x);
  try {
    p.Validate(2, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("instruction 0 loads in2 but the layout has 2 inputs"), std::string::npos)
        << e.what();
  }
  EwProgram q;
  const EwValue a = q.Load(0);
  q.Store(0, a);
  q.Store(0, q.Neg(a));
  try {
    q.Validate(1, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out0 is stored 2 times, expected once"), std::string::npos) << e.what();
  }
  EXPECT_THROW(q.Validate(1, 1), Error);
}

TEST(EwProgramTest, ReferenceBroadcastsAndReduces) {
  // Out = X + Y, Y@GRAD-like column sums of X, for X [2,3], Y [3].
  const EwLayout l = CollapseLayout({2, 3}, {{2, 3}, {1, 3}}, {{2, 3}, {1, 3}, {1, 1}});
  EwProgram p;
  const EwValue x = p.Load(0);
  p.Store(0, p.Add(x, p.Load(1)));
  p.Store(1, x);
  p.Store(2, p.Mul(x, x));
  const std::vector<float> xs = {1, 2, 3, 4, 5, 6};
  const std::vector<float> ys = {10, 20, 30};
  std::vector<double> out(6, -1), col(3, -1), all(1, -1);
  RunReference(p, l, {xs.data(), ys.data()}, {out.data(), col.data(), all.data()});
  EXPECT_EQ(out, (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(col, (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(all[0], 91.0);
  std::vector<float> outf(6), colf(3), allf(1);
  RunReferenceFloat(p, l, {xs.data(), ys.data()}, {outf.data(), colf.data(), allf.data()});
  EXPECT_EQ(colf, (std::vector<float>{5, 7, 9}));
}

TEST(EwProgramTest, ReferenceSemanticsOfMaxAndSelect) {
  const EwLayout l = CollapseLayout({4}, {{4}, {4}}, {{4}, {4}, {4}});
  EwProgram p;
  const EwValue a = p.Load(0);
  const EwValue b = p.Load(1);
  p.Store(0, p.Max(a, b));
  p.Store(1, p.Relu(a));
  p.Store(2, p.SelectGtZero(a, b));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> as = {nan, -1, 2, 0};
  const std::vector<float> bs = {5, nan, 3, 7};
  std::vector<double> mx(4), relu(4), sel(4);
  RunReference(p, l, {as.data(), bs.data()}, {mx.data(), relu.data(), sel.data()});
  EXPECT_TRUE(std::isnan(mx[0]));  // NaN in either operand: NaN (torch.maximum)
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_EQ(mx[2], 3);
  EXPECT_TRUE(std::isnan(relu[0]));  // like the reference relu, and PyTorch's
  EXPECT_EQ(relu[1], 0);
  EXPECT_EQ(sel[0], 0);
  EXPECT_EQ(sel[2], 3);
  EXPECT_EQ(sel[3], 0);
}

// select(c, a, b) = c != 0 ? a : b, a NaN c counting as nonzero; log is
// the natural logarithm (NaN below 0, -inf at 0).
TEST(EwProgramTest, LogAndSelectPrintAndEvaluate) {
  EwProgram p;
  const EwValue x = p.Load(0);
  const EwValue c = p.Load(1);
  p.Store(0, p.Select(c, p.Log(x), x));
  EXPECT_EQ(p.ToString(),
            "%0 = load in0\n"
            "%1 = load in1\n"
            "%2 = log %0\n"
            "%3 = select %1, %2, %0\n"
            "store out0, %3\n");
  const EwLayout l = CollapseLayout({5}, {{5}, {5}}, {{5}});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {std::exp(1.0f), 4.0f, 0.0f, -1.0f, 2.0f};
  const std::vector<float> cs = {1.0f, -0.0f, nan, 3.0f, 0.0f};
  std::vector<double> out(5);
  RunReference(p, l, {xs.data(), cs.data()}, {out.data()});
  EXPECT_NEAR(out[0], 1.0, 1e-7);
  EXPECT_EQ(out[1], 4.0);        // -0 counts as 0: b
  EXPECT_EQ(out[2], -HUGE_VAL);  // NaN counts as nonzero: a = log(0)
  EXPECT_TRUE(std::isnan(out[3]));
  EXPECT_EQ(out[4], 2.0);
}

// The comparisons give 1.0 or 0.0 (IEEE: false with a NaN, except ne); a
// bool output receives 1 where the value is nonzero or NaN, in both the
// double and the float interpreter.
TEST(EwProgramTest, ComparisonsAndBoolStoresPrintAndEvaluate) {
  EwProgram p;
  const EwValue x = p.Load(0), y = p.Load(1);
  const EwValue cmps[] = {p.Lt(x, y), p.Le(x, y), p.Gt(x, y), p.Ge(x, y), p.Eq(x, y), p.Ne(x, y)};
  for (int k = 0; k < 6; ++k) p.Store(k, cmps[k]);
  p.Store(6, x);  // a bool output of an f32 value
  EXPECT_EQ(p.ToString(),
            "%0 = load in0\n%1 = load in1\n%2 = lt %0, %1\n%3 = le %0, %1\n%4 = gt %0, %1\n%5 = ge %0, %1\n"
            "%6 = eq %0, %1\n%7 = ne %0, %1\nstore out0, %2\nstore out1, %3\nstore out2, %4\nstore out3, %5\n"
            "store out4, %6\nstore out5, %7\nstore out6, %0\n");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {1, 2, 2, nan, -0.0f, 0.5f};
  const std::vector<float> ys = {2, 1, 2, 1, 0.0f, nan};
  // lt, le, gt, ge, eq, ne per element, then bool(x).
  const std::vector<std::vector<double>> want = {{1, 1, 0, 0, 0, 1, 1}, {0, 0, 1, 1, 0, 1, 1}, {0, 1, 0, 1, 1, 0, 1},
                                                 {0, 0, 0, 0, 0, 1, 1}, {0, 1, 0, 1, 1, 0, 0}, {0, 0, 0, 0, 0, 1, 1}};
  EwLayout l = CollapseLayout({6}, {{6}, {6}}, std::vector<Dims>(7, Dims{6}));
  l.outputs[6].elem = EwElem::kBool;
  std::vector<std::vector<double>> out(7, std::vector<double>(6, -1));
  std::vector<std::vector<float>> outf(7, std::vector<float>(6, -1));
  std::vector<double*> ptrs;
  std::vector<float*> ptrsf;
  for (int k = 0; k < 7; ++k) {
    ptrs.push_back(out[k].data());
    ptrsf.push_back(outf[k].data());
  }
  RunReference(p, l, {xs.data(), ys.data()}, ptrs);
  RunReferenceFloat(p, l, {xs.data(), ys.data()}, ptrsf);
  for (int i = 0; i < 6; ++i) {
    for (int k = 0; k < 7; ++k) {
      EXPECT_EQ(out[k][i], want[i][k]) << "out" << k << " of " << xs[i] << ", " << ys[i];
      EXPECT_EQ(outf[k][i], want[i][k]) << "out" << k << " of " << xs[i] << ", " << ys[i];
    }
  }
}

}  // namespace
}  // namespace kiln::jit
