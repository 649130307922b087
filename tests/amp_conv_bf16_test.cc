// --amp bf16 for convolutions at op level: conv2d and both gradients of
// conv2d_grad (backward-data and backward-weights) on the oneDNN kernels
// multiplying in bf16, against the f32 reference kernels, on shapes with odd
// sizes, strides, paddings, dilations and groups; the primitive key keeps
// f32 and bf16 convolutions apart.
//
// The bound is the matmul one (amp_bf16_test.cc, docs/jit.md): every output
// element is a dot product of converted operands, so
//   |bf16 - f32| <= (2^-7 (1 + 2^-7) + 2 K 2^-24) * sum_k |a_k b_k|,
// with sum_k |a_k b_k| the reference kernel run on |a|, |b|. K, the
// contraction length: C_in/groups * KH * KW for the forward,
// C_out/groups * KH * KW for the input gradient, N * H_out * W_out for the
// filter gradient (the test uses the largest, which only loosens the tiny
// f32 term).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "framework/onednn/handlers.h"
#include "framework/op_registry.h"
#include "tests/bf16_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using onednn::PrimitiveCache;
using test::Abs;
using test::AmpBf16;
using test::RandomTensor;
using test::RunOp;

struct ConvCase {
  Dims input;   // NCHW
  Dims filter;  // OIHW, I = C / groups
  std::vector<int64_t> strides = {1, 1}, paddings = {0, 0}, dilations = {1, 1};
  int64_t groups = 1;
};

std::string Describe(const ConvCase& c) {
  return "input " + DimsToString(c.input) + " filter " + DimsToString(c.filter) + " strides " +
         DimsToString(c.strides) + " paddings " + DimsToString(c.paddings) + " dilations " +
         DimsToString(c.dilations) + " groups " + std::to_string(c.groups);
}

proto::OpDesc Op(const std::string& type, const ConvCase& c) {
  OpBuilder b(type);
  b.In("Input", {"in"}).In("Filter", {"f"});
  b.Attr("strides", c.strides).Attr("paddings", c.paddings).Attr("dilations", c.dilations).Attr("groups", c.groups);
  if (type == "conv2d") return b.Out("Output", {"out"}).Build();
  return b.In("Output@GRAD", {"dout"}).Out("Input@GRAD", {"din"}).Out("Filter@GRAD", {"df"}).Build();
}

Tensor Out(const std::unique_ptr<Scope>& scope, const std::string& name) { return *scope->GetTensor(name); }

// Odd sizes and tails everywhere, then a few drawn at random.
std::vector<ConvCase> Cases() {
  std::vector<ConvCase> cases = {
      {{2, 3, 7, 9}, {5, 3, 3, 3}},                                  // few input channels (plain backward-data)
      {{3, 16, 11, 13}, {17, 16, 3, 3}, {2, 2}, {1, 1}},              // stride 2, padding, O tail
      {{1, 9, 15, 15}, {7, 9, 5, 5}, {1, 2}, {2, 1}, {2, 1}},         // mixed strides, dilation
      {{2, 12, 9, 9}, {18, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},      // groups
      {{4, 6, 14, 14}, {16, 6, 5, 5}},                                // LeNet's second layer shape
  };
  std::mt19937 rng(31);
  auto pick = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int i = 0; i < 4; ++i) {
    ConvCase c;
    const int64_t k = 2 * pick(0, 2) + 1;
    c.strides = {pick(1, 2), pick(1, 2)};
    c.paddings = {pick(0, k / 2), pick(0, k / 2)};
    c.input = {pick(1, 3), 2 * pick(1, 8) + 1, k + pick(0, 12), k + pick(0, 12)};
    c.filter = {2 * pick(1, 8) + 1, c.input[1], k, k};
    cases.push_back(c);
  }
  return cases;
}

int64_t Contraction(const ConvCase& c, const Dims& out) {
  const int64_t window = c.filter[2] * c.filter[3];
  return std::max({c.filter[1] * window, c.filter[0] / c.groups * window, out[0] * out[2] * out[3]});
}

TEST(AmpConvBf16Test, ForwardWithinTheBf16Bound) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(21);
  for (const ConvCase& c : Cases()) {
    const Tensor in = RandomTensor(c.input, DataType::kFP32, rng), f = RandomTensor(c.filter, DataType::kFP32, rng);
    const Tensor ref = Out(RunOp(Op("conv2d", c), {{"in", in}, {"f", f}}), "out");
    const Tensor abs_ref = Out(RunOp(Op("conv2d", c), {{"in", Abs(in)}, {"f", Abs(f)}}), "out");
    const Tensor got = Out(RunOp(Op("conv2d", c), {{"in", in}, {"f", f}}, /*use_onednn=*/true, AmpBf16()), "out");
    const test::Bf16Worst w = test::CheckBf16Bound(got, ref, abs_ref, Contraction(c, ref.dims()), Describe(c));
    EXPECT_EQ(w.failure, "");
    // Above f32 rounding (2^-20 relative at these K): the product did run in bf16.
    EXPECT_GT(w.ratio, std::ldexp(1.0, -14)) << Describe(c) << ": no bf16 rounding visible";
  }
}

TEST(AmpConvBf16Test, GradientsWithinTheBf16Bound) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(22);
  for (const ConvCase& c : Cases()) {
    const Tensor in = RandomTensor(c.input, DataType::kFP32, rng), f = RandomTensor(c.filter, DataType::kFP32, rng);
    const Tensor out = Out(RunOp(Op("conv2d", c), {{"in", in}, {"f", f}}), "out");
    const Tensor dout = RandomTensor(out.dims(), DataType::kFP32, rng);
    auto ref = RunOp(Op("conv2d_grad", c), {{"in", in}, {"f", f}, {"dout", dout}});
    auto abs_ref = RunOp(Op("conv2d_grad", c), {{"in", Abs(in)}, {"f", Abs(f)}, {"dout", Abs(dout)}});
    auto got = RunOp(Op("conv2d_grad", c), {{"in", in}, {"f", f}, {"dout", dout}}, /*use_onednn=*/true, AmpBf16());
    for (const char* g : {"din", "df"}) {
      const std::string what = Describe(c) + " " + g;
      const test::Bf16Worst w =
          test::CheckBf16Bound(Out(got, g), Out(ref, g), Out(abs_ref, g), Contraction(c, out.dims()), what);
      EXPECT_EQ(w.failure, "");
      EXPECT_GT(w.ratio, std::ldexp(1.0, -14)) << what << ": no bf16 rounding visible";
    }
  }
}

TEST(AmpConvBf16Test, PrimitiveKeyKeepsF32AndBf16Apart) {
  PrimitiveCache cache;
  const Dims in = {2, 8, 9, 9}, filter = {6, 8, 3, 3};
  onednn::ConvHandler f32(cache, onednn::Settings{}, in, filter, {1, 1}, {1, 1}, {1, 1}, 1);
  onednn::ConvHandler bf16(cache, onednn::Settings{}, in, filter, {1, 1}, {1, 1}, {1, 1}, 1, {}, ComputeType::kBF16);
  EXPECT_NE(f32.forward_key(), bf16.forward_key());
  EXPECT_NE(f32.forward_key().Hash(), bf16.forward_key().Hash());
  EXPECT_NE(f32.forward_key().ToString().find("conv"), std::string::npos);
  EXPECT_EQ(f32.forward_key().ToString().find("compute="), std::string::npos);
  EXPECT_NE(bf16.forward_key().ToString().find(" f32 compute=bf16 [2,8,9,9]x[6,8,3,3]"), std::string::npos)
      << bf16.forward_key().ToString();
  KILN_SKIP_WITHOUT_BF16();  // the keys above hold everywhere; creating the primitives needs bf16 kernels
  std::mt19937 rng(23);
  const Tensor x = RandomTensor(in, DataType::kFP32, rng), w = RandomTensor(filter, DataType::kFP32, rng);
  const Tensor dy = RandomTensor({2, 6, 9, 9}, DataType::kFP32, rng);
  Tensor y(DataType::kFP32, {2, 6, 9, 9}), dx(DataType::kFP32, in), dw(DataType::kFP32, filter);
  for (onednn::ConvHandler* h : {&f32, &bf16}) {
    ASSERT_TRUE(h->RunForward(x, w, &y));
    ASSERT_TRUE(h->RunBackwardData(w, dy, &dx));
    ASSERT_TRUE(h->RunBackwardWeights(x, dy, &dw));
  }
  EXPECT_EQ(cache.stats().size, 6u);  // forward, backward-data, backward-weights of each
  // The bf16 entries bind f32 tensors and compute on bf16 operands.
  ASSERT_TRUE(bf16.AcquireForwardPrimitive());
  EXPECT_EQ(bf16.UserDesc(DNNL_ARG_SRC).data_type(), dnnl::memory::data_type::f32);
  EXPECT_EQ(bf16.UserDesc(DNNL_ARG_DST).data_type(), dnnl::memory::data_type::f32);
  EXPECT_EQ(bf16.entry().pd.query_md(dnnl::query::src_md).data_type(), dnnl::memory::data_type::bf16);
  EXPECT_EQ(bf16.entry().pd.query_md(dnnl::query::weights_md).data_type(), dnnl::memory::data_type::bf16);
  EXPECT_EQ(bf16.entry().pd.query_md(dnnl::query::dst_md).data_type(), dnnl::memory::data_type::f32);
}

}  // namespace
}  // namespace kiln
