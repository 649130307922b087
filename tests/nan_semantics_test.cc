// NaN and Inf behave as in PyTorch: relu and max-pool propagate NaN on the
// reference kernels, on oneDNN's kernels and in compiled clusters (generated
// code and oneDNN post-ops). relu(+inf) is +inf, relu(-inf) is 0. The
// generated max/min themselves are tested in ew_codegen_test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "framework/op_desc.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Random values with NaN at `nans` (flat indices), +inf at 1 and -inf at 2.
Tensor WithSpecials(const Dims& dims, const std::vector<int64_t>& nans, unsigned seed) {
  std::mt19937 rng(seed);
  Tensor t = test::RandomTensor(dims, DataType::kFP32, rng, -2.0, 2.0);
  float* p = t.mutable_data<float>();
  for (int64_t i : nans) p[i] = kNaN;
  p[1] = kInf;
  p[2] = -kInf;
  return t;
}

proto::OpDesc Relu() { return OpBuilder("relu").In("X", {"x"}).Out("Out", {"out"}).Build(); }

TEST(NanSemanticsTest, ReluPropagatesNaNOnEveryKernel) {
  for (const Dims& dims : {Dims{37}, Dims{4, 33}}) {
    const int64_t n = Numel(dims);
    const Tensor x = WithSpecials(dims, {0, 5, 16, n - 1}, 1);
    for (bool onednn : {false, true}) {
      const Tensor out = test::RunOp(Relu(), {{"x", x}}, onednn)->GetVar("out")->Get();
      const float* o = out.data<float>();
      const float* in = x.data<float>();
      for (int64_t i = 0; i < n; ++i) {
        const float want = std::isnan(in[i]) ? kNaN : (in[i] > 0 ? in[i] : 0.0f);
        EXPECT_TRUE(std::isnan(want) ? std::isnan(o[i]) : o[i] == want)
            << "relu(" << in[i] << ") = " << o[i] << " at " << i << (onednn ? " (oneDNN)" : " (reference)");
      }
    }
  }
}

TEST(NanSemanticsTest, MaxPoolPropagatesNaNAndItsGradGoesThere) {
  const Dims dims{2, 3, 7, 9};
  const Tensor x = WithSpecials(dims, {0, 40, 100, Numel(dims) - 1}, 2);
  const proto::OpDesc pool = OpBuilder("pool2d")
                                 .In("X", {"x"})
                                 .Out("Out", {"out"})
                                 .Attr("pooling_type", std::string("max"))
                                 .Attr("ksize", std::vector<int64_t>{3, 3})
                                 .Attr("strides", std::vector<int64_t>{2, 2})
                                 .Attr("paddings", std::vector<int64_t>{1, 1})
                                 .Build();
  const Tensor ref = test::RunOp(pool, {{"x", x}}, false)->GetVar("out")->Get();
  // Every window is checked against the definition: NaN if any element is.
  const float* in = x.data<float>();
  const float* r = ref.data<float>();
  const int64_t ho = ref.dims()[2], wo = ref.dims()[3];
  for (int64_t nc = 0; nc < 6; ++nc) {
    for (int64_t oh = 0; oh < ho; ++oh) {
      for (int64_t ow = 0; ow < wo; ++ow) {
        bool any_nan = false;
        float m = -kInf;
        for (int64_t h = std::max<int64_t>(oh * 2 - 1, 0); h < std::min<int64_t>(oh * 2 + 2, 7); ++h) {
          for (int64_t w = std::max<int64_t>(ow * 2 - 1, 0); w < std::min<int64_t>(ow * 2 + 2, 9); ++w) {
            const float v = in[(nc * 7 + h) * 9 + w];
            any_nan = any_nan || std::isnan(v);
            m = std::max(m, v);
          }
        }
        const float got = r[(nc * ho + oh) * wo + ow];
        EXPECT_TRUE(any_nan ? std::isnan(got) : got == m) << "window " << nc << "," << oh << "," << ow;
      }
    }
  }
  const Tensor dnn = test::RunOp(pool, {{"x", x}}, true)->GetVar("out")->Get();
  EXPECT_EQ(test::CompareTensors(dnn, ref, 0, 0), "") << "oneDNN max-pool";
}

// A compiled cluster: generated relu, and relu as a oneDNN matmul post-op.
TEST(NanSemanticsTest, CompiledClustersPropagateNaN) {
  test::LoweringCase gen;
  gen.name = "nan_relu_scale";
  gen.ops = {Relu(), OpBuilder("scale").In("X", {"out"}).Out("Out", {"y"}).Attr("scale", 2.0f).Build()};
  gen.inputs = {{"x", {5, 37}}};
  gen.outputs = {"y"};
  gen.given["x"] = WithSpecials({5, 37}, {0, 36, 100, 184}, 3);
  test::CheckLoweringNumerics(gen);

  test::LoweringCase mm;
  mm.name = "nan_matmul_bias_relu";
  mm.ops = {OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"xw"}).Build(),
            OpBuilder("elementwise_add").In("X", {"xw"}).In("Y", {"b"}).Out("Out", {"z"}).Build(),
            OpBuilder("relu").In("X", {"z"}).Out("Out", {"y"}).Build()};
  mm.inputs = {{"x", {6, 17}}, {"w", {17, 9}}, {"b", {9}}};
  mm.outputs = {"y"};
  Tensor x = WithSpecials({6, 17}, {3, 40}, 4);  // rows 0 and 2 hold a NaN (and row 0 infinities)
  mm.given["x"] = x;
  auto obj = test::CheckLoweringNumerics(mm, 1e-4, 1e-4);
  EXPECT_TRUE(test::StepMatched(*obj, "matmul_epilogue")) << obj->Listing();
}

}  // namespace
}  // namespace kiln
