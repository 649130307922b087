// conv2d / pool2d and their grads: values against direct loops written from
// the definitions, gradients against finite differences, bad-input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

using test::CheckGrad;
using test::CompareTensors;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

// ---- conv2d --------------------------------------------------------------------

struct ConvCase {
  Dims input, filter;  // NCHW, OIHW
  std::vector<int64_t> strides{1, 1}, paddings{0, 0}, dilations{1, 1};
  int64_t groups = 1;
};

proto::OpDesc ConvOp(const ConvCase& c) {
  return OpBuilder("conv2d")
      .In("Input", {"x"})
      .In("Filter", {"w"})
      .Out("Output", {"y"})
      .Attr("strides", c.strides)
      .Attr("paddings", c.paddings)
      .Attr("dilations", c.dilations)
      .Attr("groups", c.groups)
      .Build();
}

// Out[n, oc, oh, ow] = sum over the group's input channels and filter taps of
// x[n, ic, oh*s - p + k*d, ...] * w[oc, ic - first, kh, kw]; padding reads 0.
Tensor NaiveConv(const Tensor& x, const Tensor& w, const ConvCase& c) {
  const int64_t n = c.input[0], ci = c.input[1], h = c.input[2], wd = c.input[3];
  const int64_t o = c.filter[0], cg = c.filter[1], kh = c.filter[2], kw = c.filter[3];
  const int64_t ho = (h + 2 * c.paddings[0] - c.dilations[0] * (kh - 1) - 1) / c.strides[0] + 1;
  const int64_t wo = (wd + 2 * c.paddings[1] - c.dilations[1] * (kw - 1) - 1) / c.strides[1] + 1;
  const int64_t og = o / c.groups;
  Tensor out(DataType::kFP64, {n, o, ho, wo});
  double* p = out.mutable_data<double>();
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oc = 0; oc < o; ++oc) {
      for (int64_t oh = 0; oh < ho; ++oh) {
        for (int64_t ow = 0; ow < wo; ++ow) {
          double s = 0;
          for (int64_t j = 0; j < cg; ++j) {
            const int64_t ic = (oc / og) * cg + j;
            for (int64_t a = 0; a < kh; ++a) {
              for (int64_t bb = 0; bb < kw; ++bb) {
                const int64_t ih = oh * c.strides[0] - c.paddings[0] + a * c.dilations[0];
                const int64_t iw = ow * c.strides[1] - c.paddings[1] + bb * c.dilations[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                s += ValueAt(x, ((b * ci + ic) * h + ih) * wd + iw) * ValueAt(w, ((oc * cg + j) * kh + a) * kw + bb);
              }
            }
          }
          p[((b * o + oc) * ho + oh) * wo + ow] = s;
        }
      }
    }
  }
  return out;
}

std::vector<ConvCase> ConvValueCases() {
  return {
      {{1, 1, 1, 1}, {1, 1, 1, 1}},
      {{2, 3, 7, 17}, {5, 3, 3, 3}, {2, 2}, {1, 1}},
      {{1, 9, 17, 7}, {15, 3, 3, 2}, {1, 2}, {2, 1}, {2, 2}, 3},  // groups, dilation 2
      {{2, 7, 7, 7}, {7, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 7},     // depthwise
      {{1, 3, 33, 33}, {1, 3, 5, 5}, {2, 2}, {2, 2}},
      {{3, 5, 17, 1}, {3, 5, 3, 1}, {2, 1}, {1, 0}, {2, 1}},
      {{1, 2, 1, 33}, {4, 1, 1, 7}, {1, 3}, {0, 3}, {1, 2}, 2},
  };
}

TEST(Conv2dOpTest, MatchesNaiveFp32AndFp64) {
  std::mt19937 rng(11);
  for (const ConvCase& c : ConvValueCases()) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      Tensor x = RandomTensor(c.input, dtype, rng);
      Tensor w = RandomTensor(c.filter, dtype, rng);
      auto scope = RunOp(ConvOp(c), {{"x", x}, {"w", w}});
      const Tensor& y = scope->GetVar("y")->Get();
      EXPECT_EQ(y.dtype(), dtype);
      const double tol = dtype == DataType::kFP32 ? 1e-5 : 1e-12;
      EXPECT_EQ(CompareTensors(y, NaiveConv(x, w, c), tol, tol), "")
          << DimsToString(c.input) << " * " << DimsToString(c.filter) << " groups " << c.groups;
    }
  }
}

TEST(Conv2dOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(12);
  const std::vector<ConvCase> cases = {
      {{1, 1, 1, 1}, {1, 1, 1, 1}},
      {{2, 3, 5, 6}, {4, 3, 3, 3}, {2, 2}, {1, 1}},
      {{1, 6, 7, 5}, {9, 2, 3, 2}, {1, 2}, {2, 1}, {2, 2}, 3},
      {{1, 3, 5, 5}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},
  };
  for (const ConvCase& c : cases) {
    std::map<std::string, Tensor> in = {{"x", RandomTensor(c.input, DataType::kFP64, rng)},
                                        {"w", RandomTensor(c.filter, DataType::kFP64, rng)}};
    EXPECT_EQ(CheckGrad(ConvOp(c), in, {"x", "w"}, {"y"}), "")
        << DimsToString(c.input) << " * " << DimsToString(c.filter) << " groups " << c.groups;
  }
}

TEST(Conv2dOpTest, BadInputsAreRejected) {
  std::mt19937 rng(13);
  auto run = [&](const ConvCase& c) {
    return ErrorOf([&] {
      RunOp(ConvOp(c), {{"x", RandomTensor(c.input, DataType::kFP32, rng)},
                        {"w", RandomTensor(c.filter, DataType::kFP32, rng)}});
    });
  };
  std::string msg = run({{1, 3, 5, 5}, {4, 2, 3, 3}});
  EXPECT_NE(msg.find("'conv2d'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input channels mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1,3,5,5]"), std::string::npos) << msg;
  msg = run({{1, 6, 5, 5}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 3});  // 4 % 3
  EXPECT_NE(msg.find("not divisible by groups 3"), std::string::npos) << msg;
  msg = run({{1, 3, 5}, {4, 3, 3, 3}});
  EXPECT_NE(msg.find("input Input: expected rank 4"), std::string::npos) << msg;
  msg = run({{1, 3, 2, 2}, {4, 3, 3, 3}});
  EXPECT_NE(msg.find("larger than the padded input"), std::string::npos) << msg;
  msg = run({{1, 3, 5, 5}, {4, 3, 3, 3}, {1, 1, 1}});
  EXPECT_NE(msg.find("attribute 'strides' needs 2 values"), std::string::npos) << msg;
}

TEST(Conv2dOpTest, BuildTimeShapesPropagateUnknownDims) {
  proto::BlockDesc block;
  for (const auto& [name, dims] : {std::pair<std::string, Dims>{"x", {-1, 3, 28, 28}}, {"w", {8, 3, 5, 5}}}) {
    proto::VarDesc* v = block.add_vars();
    v->set_name(name);
    for (int64_t d : dims) v->add_dims(d);
  }
  ConvCase c{{-1, 3, 28, 28}, {8, 3, 5, 5}, {2, 2}, {2, 2}};
  *block.add_ops() = ConvOp(c);
  InferShapeAtBuild(&block, 0, /*declare_outputs=*/true);
  EXPECT_EQ(VarDims(*FindVarDesc(block, "y")), (Dims{-1, 8, 14, 14}));
}

// ---- pool2d --------------------------------------------------------------------

struct PoolCase {
  Dims x;
  std::string type;
  std::vector<int64_t> ksize, strides{1, 1}, paddings{0, 0};
  bool global = false, exclusive = true;
};

proto::OpDesc PoolOp(const PoolCase& c) {
  return OpBuilder("pool2d")
      .In("X", {"x"})
      .Out("Out", {"y"})
      .Attr("pooling_type", c.type)
      .Attr("ksize", c.ksize)
      .Attr("strides", c.strides)
      .Attr("paddings", c.paddings)
      .Attr("global_pooling", c.global)
      .Attr("exclusive", c.exclusive)
      .Build();
}

Tensor NaivePool(const Tensor& x, const PoolCase& c) {
  const int64_t n = c.x[0], ch = c.x[1], h = c.x[2], w = c.x[3];
  int64_t kh = c.ksize[0], kw = c.ksize[1], sh = c.strides[0], sw = c.strides[1], ph = c.paddings[0],
          pw = c.paddings[1];
  if (c.global) kh = h, kw = w, sh = sw = 1, ph = pw = 0;
  const int64_t ho = (h + 2 * ph - kh) / sh + 1, wo = (w + 2 * pw - kw) / sw + 1;
  Tensor out(DataType::kFP64, {n, ch, ho, wo});
  double* p = out.mutable_data<double>();
  for (int64_t nc = 0; nc < n * ch; ++nc) {
    for (int64_t oh = 0; oh < ho; ++oh) {
      for (int64_t ow = 0; ow < wo; ++ow) {
        double best = -INFINITY, sum = 0;
        int64_t count = 0;
        for (int64_t a = 0; a < kh; ++a) {
          for (int64_t b = 0; b < kw; ++b) {
            const int64_t ih = oh * sh - ph + a, iw = ow * sw - pw + b;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const double v = ValueAt(x, (nc * h + ih) * w + iw);
            best = std::max(best, v);
            sum += v;
            ++count;
          }
        }
        p[(nc * ho + oh) * wo + ow] = c.type == "max" ? best : sum / (c.exclusive ? count : kh * kw);
      }
    }
  }
  return out;
}

std::vector<PoolCase> PoolValueCases() {
  std::vector<PoolCase> cases;
  for (const std::string type : {"max", "avg"}) {
    cases.push_back({{1, 1, 1, 1}, type, {1, 1}});
    cases.push_back({{2, 3, 7, 17}, type, {2, 2}, {2, 2}});
    cases.push_back({{1, 5, 17, 7}, type, {3, 3}, {1, 1}, {1, 1}, false, true});
    cases.push_back({{1, 5, 17, 7}, type, {3, 3}, {1, 1}, {1, 1}, false, false});
    cases.push_back({{2, 3, 33, 33}, type, {3, 2}, {2, 3}, {2, 1}, false, true});
    cases.push_back({{2, 3, 33, 33}, type, {3, 2}, {2, 3}, {2, 1}, false, false});
    cases.push_back({{2, 7, 7, 17}, type, {2, 2}, {1, 1}, {0, 0}, true});
    // Global pooling ignores ksize, strides and paddings, whatever they hold.
    cases.push_back({{2, 3, 5, 6}, type, {0, 0}, {0, 0}, {9, 9}, true});
    cases.push_back({{1, 3, 1, 33}, type, {1, 5}, {1, 2}, {0, 2}});
  }
  return cases;
}

TEST(Pool2dOpTest, MatchesNaiveFp32AndFp64) {
  std::mt19937 rng(21);
  for (const PoolCase& c : PoolValueCases()) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      Tensor x = RandomTensor(c.x, dtype, rng);
      auto scope = RunOp(PoolOp(c), {{"x", x}});
      const Tensor& y = scope->GetVar("y")->Get();
      EXPECT_EQ(y.dtype(), dtype);
      const double tol = dtype == DataType::kFP32 ? 1e-6 : 1e-13;
      EXPECT_EQ(CompareTensors(y, NaivePool(x, c), tol, tol), "")
          << c.type << " " << DimsToString(c.x) << " global " << c.global << " exclusive " << c.exclusive;
    }
  }
}

// A tensor whose values are distinct, 0.01 apart, in random order: no ties in
// any max-pool window, and finite differences never change the argmax.
Tensor DistinctTensor(const Dims& dims, std::mt19937& rng) {
  Tensor t(DataType::kFP64, dims);
  std::vector<int64_t> order(t.numel());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  double* p = t.mutable_data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.01 * static_cast<double>(order[i]) - 1.0;
  return t;
}

TEST(Pool2dOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(22);
  const std::vector<PoolCase> cases = {
      {{1, 1, 1, 1}, "max", {1, 1}},
      {{2, 3, 6, 7}, "max", {2, 2}, {2, 2}},
      {{1, 3, 7, 5}, "max", {3, 3}, {1, 1}, {1, 1}},  // overlapping windows
      {{1, 3, 7, 5}, "max", {3, 2}, {2, 1}, {2, 1}},
      {{2, 3, 5, 7}, "max", {2, 2}, {1, 1}, {0, 0}, true},
      {{2, 3, 6, 7}, "avg", {2, 2}, {2, 2}},
      {{1, 3, 7, 5}, "avg", {3, 3}, {1, 1}, {1, 1}, false, true},
      {{1, 3, 7, 5}, "avg", {3, 3}, {2, 1}, {2, 1}, false, false},
      {{2, 3, 5, 7}, "avg", {2, 2}, {1, 1}, {0, 0}, true},
  };
  for (const PoolCase& c : cases) {
    std::map<std::string, Tensor> in = {{"x", DistinctTensor(c.x, rng)}};
    EXPECT_EQ(CheckGrad(PoolOp(c), in, {"x"}, {"y"}), "")
        << c.type << " " << DimsToString(c.x) << " global " << c.global << " exclusive " << c.exclusive;
  }
}

TEST(Pool2dOpTest, MaxGradGoesToFirstMaximumOfWindow) {
  // One 2x3 window holding the maximum 5 three times.
  PoolCase c{{1, 1, 2, 3}, "max", {2, 3}};
  Tensor x = test::FloatTensor({1, 1, 2, 3}, {1, 5, 5, 2, 5, 0});
  auto fwd = RunOp(PoolOp(c), {{"x", x}});
  Tensor y;
  y.CopyFrom(fwd->GetVar("y")->Get());
  ASSERT_EQ(y.dims(), (Dims{1, 1, 1, 1}));
  EXPECT_EQ(ValueAt(y, 0), 5.0);
  proto::OpDesc grad = OpRegistry::Global().Get("pool2d").grad_maker(PoolOp(c))[0];
  auto scope = RunOp(grad, {{"x", x}, {"y", y}, {"y@GRAD", test::FloatTensor({1, 1, 1, 1}, {3})}});
  const Tensor& dx = scope->GetVar("x@GRAD")->Get();
  const std::vector<double> want = {0, 3, 0, 0, 0, 0};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(ValueAt(dx, i), want[i]) << i;
}

TEST(Pool2dOpTest, BadInputsAreRejected) {
  std::mt19937 rng(23);
  auto run = [&](const PoolCase& c) {
    return ErrorOf([&] { RunOp(PoolOp(c), {{"x", RandomTensor(c.x, DataType::kFP32, rng)}}); });
  };
  std::string msg = run({{1, 1, 4, 4}, "min", {2, 2}});
  EXPECT_NE(msg.find("'pooling_type' must be \"max\" or \"avg\""), std::string::npos) << msg;
  msg = run({{1, 1, 4, 4}, "max", {2, 2}, {1, 1}, {2, 0}});
  EXPECT_NE(msg.find("must be smaller than ksize"), std::string::npos) << msg;
  msg = run({{1, 1, 2, 2}, "avg", {3, 3}});
  EXPECT_NE(msg.find("larger than the padded input"), std::string::npos) << msg;
  msg = run({{4, 4}, "avg", {2, 2}});
  EXPECT_NE(msg.find("input X: expected rank 4"), std::string::npos) << msg;
  // ksize is required.
  msg = ErrorOf([&] {
    RunOp(OpBuilder("pool2d").In("X", {"x"}).Out("Out", {"y"}).Build(),
          {{"x", RandomTensor({1, 1, 2, 2}, DataType::kFP32, rng)}});
  });
  EXPECT_NE(msg.find("missing required attribute 'ksize'"), std::string::npos) << msg;
}

TEST(ConvPoolOpsTest, RegistryEntries) {
  for (const char* type : {"conv2d", "conv2d_grad", "pool2d", "pool2d_grad"}) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_EQ(info.jit, JitLowering::kOneDnn) << type;
    EXPECT_FALSE(info.doc.empty()) << type;
  }
}

}  // namespace
}  // namespace kiln
