// --amp bf16 at op level: matmul and both of matmul_grad's gradients on the
// oneDNN kernels multiplying in bf16, against the f32 reference kernels, on
// shapes with odd sizes and vector tails; the primitive key keeps f32 and
// bf16 primitives apart; a fused bias + relu still works on the f32 dst.
//
// Tolerance (docs/jit.md, "Mixed precision"): converting an f32 to bf16
// (8 significant bits, round to nearest even) changes it by at most
// u = 2^-8 relative, so each product a*b of converted operands is off by at
// most (2u + u^2)|a b| < 2^-7 (1 + 2^-7) |a b|, and a sum of K of them by
// that times sum_k |a_k b_k|, plus f32 accumulation (K * 2^-24 sum_k |a_k
// b_k| on either side). So every element must satisfy
//   |bf16 - f32| <= (2^-7 (1 + 2^-7) + 2 K 2^-24) * sum_k |a_k b_k|,
// a bound, not an estimate: with random signs the typical error is about
// 2^-8 sqrt(K) times the typical |a b|, far below it. sum_k |a_k b_k| is
// the reference kernel run on |a|, |b| (and |alpha|).
#include <gtest/gtest.h>

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

struct Case {
  Dims x, y;
  bool tx = false, ty = false;
  float alpha = 1.0f;
};

proto::OpDesc Op(const std::string& type, const Case& c) {
  OpBuilder b(type);
  b.In("X", {"x"}).In("Y", {"y"}).Attr("transpose_X", c.tx).Attr("transpose_Y", c.ty).Attr("alpha", c.alpha);
  if (type == "matmul") return b.Out("Out", {"out"}).Build();
  return b.In("Out@GRAD", {"dout"}).Out("X@GRAD", {"dx"}).Out("Y@GRAD", {"dy"}).Build();
}

// The output `name` of a run (a Tensor copy shares the buffer, which
// outlives the scope).
Tensor Out(const std::unique_ptr<Scope>& scope, const std::string& name) { return *scope->GetTensor(name); }

std::vector<Case> Cases() {
  return {
      {{3, 17}, {17, 5}},                          // odd everything
      {{33, 129}, {129, 31}},                      // K past the 128 block, tails
      {{16, 16}, {16, 16}},                        // one AVX-512 vector
      {{64, 784}, {784, 65}, false, false, 1.f},   // the MLP's first layer, N tail
      {{7, 13}, {5, 13}, false, true, 0.5f},       // transposed weights, alpha
      {{13, 7}, {13, 9}, true, false},             // transposed src
      {{13, 7}, {9, 13}, true, true, -1.5f},       // both
      {{2, 3, 19}, {19, 11}},                      // Y broadcast over the batch (folded)
      {{4, 9, 15}, {4, 15, 6}},                    // batched
  };
}

// The contraction length of each product of a case: forward K, dX's, dY's.
int64_t MaxContraction(const Case& c) {
  int64_t k = 1;
  for (int64_t d : c.x) k = std::max(k, d);
  for (int64_t d : c.y) k = std::max(k, d);
  return k * 4;  // the folded dY sums over batch * M rows
}

TEST(AmpBf16Test, MatmulForwardWithinTheBf16Bound) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(11);
  for (const Case& c : Cases()) {
    const std::string what = DimsToString(c.x) + " @ " + DimsToString(c.y) + " tx=" + std::to_string(c.tx) +
                             " ty=" + std::to_string(c.ty);
    const Tensor x = RandomTensor(c.x, DataType::kFP32, rng), y = RandomTensor(c.y, DataType::kFP32, rng);
    const Tensor ref = Out(RunOp(Op("matmul", c), {{"x", x}, {"y", y}}), "out");
    Case abs_case = c;
    abs_case.alpha = std::fabs(c.alpha);
    const Tensor abs_ref = Out(RunOp(Op("matmul", abs_case), {{"x", Abs(x)}, {"y", Abs(y)}}), "out");
    const Tensor got = Out(RunOp(Op("matmul", c), {{"x", x}, {"y", y}}, /*use_onednn=*/true, AmpBf16()), "out");
    const test::Bf16Worst w = test::CheckBf16Bound(got, ref, abs_ref, MaxContraction(c), what);
    EXPECT_EQ(w.failure, "");
    // Above f32 rounding (2^-20 relative at these K): the product did run in bf16.
    EXPECT_GT(w.ratio, std::ldexp(1.0, -14)) << what << ": no bf16 rounding visible";
  }
}

TEST(AmpBf16Test, MatmulGradientsWithinTheBf16Bound) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(12);
  for (const Case& c : Cases()) {
    const std::string what = DimsToString(c.x) + " @ " + DimsToString(c.y) + " tx=" + std::to_string(c.tx) +
                             " ty=" + std::to_string(c.ty);
    const Tensor x = RandomTensor(c.x, DataType::kFP32, rng), y = RandomTensor(c.y, DataType::kFP32, rng);
    const Tensor out = Out(RunOp(Op("matmul", c), {{"x", x}, {"y", y}}), "out");
    const Tensor dout = RandomTensor(out.dims(), DataType::kFP32, rng);
    auto ref = RunOp(Op("matmul_grad", c), {{"x", x}, {"y", y}, {"dout", dout}});
    Case abs_case = c;
    abs_case.alpha = std::fabs(c.alpha);
    auto abs_ref = RunOp(Op("matmul_grad", abs_case), {{"x", Abs(x)}, {"y", Abs(y)}, {"dout", Abs(dout)}});
    auto got = RunOp(Op("matmul_grad", c), {{"x", x}, {"y", y}, {"dout", dout}}, /*use_onednn=*/true, AmpBf16());
    for (const char* g : {"dx", "dy"}) {
      const test::Bf16Worst w =
          test::CheckBf16Bound(Out(got, g), Out(ref, g), Out(abs_ref, g), MaxContraction(c), what + " " + g);
      EXPECT_EQ(w.failure, "");
      EXPECT_GT(w.ratio, std::ldexp(1.0, -14)) << what << " " << g << ": no bf16 rounding visible";
    }
  }
}

TEST(AmpBf16Test, PrimitiveKeyKeepsF32AndBf16Apart) {
  PrimitiveCache cache;
  onednn::MatmulHandler f32(cache, onednn::Settings{}, {8, 24}, false, {24, 5}, false, 1.f);
  onednn::MatmulHandler bf16(cache, onednn::Settings{}, {8, 24}, false, {24, 5}, false, 1.f, {}, ComputeType::kBF16);
  EXPECT_NE(f32.forward_key(), bf16.forward_key());
  EXPECT_NE(f32.forward_key().Hash(), bf16.forward_key().Hash());
  EXPECT_EQ(bf16.forward_key().ToString(), "matmul f32 compute=bf16 [8,24]x[24,5] scale=1");
  EXPECT_EQ(f32.forward_key().ToString(), "matmul f32 [8,24]x[24,5] scale=1");
  KILN_SKIP_WITHOUT_BF16();  // the keys above hold everywhere; creating the primitive needs bf16 kernels
  ASSERT_TRUE(f32.AcquireForwardPrimitive());
  ASSERT_TRUE(bf16.AcquireForwardPrimitive());
  EXPECT_EQ(cache.stats().size, 2u);
  // f32 binds the tensors as they are; bf16 converts src and weights, and
  // both bind f32 buffers throughout.
  EXPECT_TRUE(f32.entry().reorders.empty());
  ASSERT_EQ(bf16.entry().reorders.size(), 2u);
  for (int arg : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}) {
    EXPECT_EQ(bf16.UserDesc(arg).data_type(), dnnl::memory::data_type::f32) << arg;
  }
  EXPECT_EQ(bf16.entry().pd.query_md(dnnl::query::src_md).data_type(), dnnl::memory::data_type::bf16);
  EXPECT_EQ(bf16.entry().pd.query_md(dnnl::query::dst_md).data_type(), dnnl::memory::data_type::f32);
}

TEST(AmpBf16Test, FusedBiasReluOnTheF32Dst) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(13);
  PrimitiveCache cache;
  onednn::FusedOps fused;
  fused.bias = true;
  fused.post_ops.push_back(onednn::PostOp::Eltwise(dnnl::algorithm::eltwise_relu));
  const Tensor a = RandomTensor({9, 37}, DataType::kFP32, rng), b = RandomTensor({37, 19}, DataType::kFP32, rng);
  const Tensor bias = RandomTensor({19}, DataType::kFP32, rng);
  Tensor plain(DataType::kFP32, {9, 19}), abs_plain(DataType::kFP32, {9, 19}), got(DataType::kFP32, {9, 19});
  onednn::MatmulHandler ref(cache, onednn::Settings{}, a.dims(), false, b.dims(), false, 1.f);
  ASSERT_TRUE(ref.Run(a, b, &plain));
  onednn::MatmulHandler abs_h(cache, onednn::Settings{}, a.dims(), false, b.dims(), false, 1.f);
  ASSERT_TRUE(abs_h.Run(Abs(a), Abs(b), &abs_plain));
  onednn::MatmulHandler h(cache, onednn::Settings{}, a.dims(), false, b.dims(), false, 1.f, fused, ComputeType::kBF16);
  ASSERT_TRUE(h.Run(a, b, &bias, &got));
  float* p = plain.mutable_data<float>();
  for (int64_t i = 0; i < plain.numel(); ++i) p[i] = std::max(0.f, p[i] + bias.data<float>()[i % 19]);
  // relu only shrinks the difference; the bias adds in f32.
  EXPECT_EQ(test::CheckBf16Bound(got, plain, abs_plain, 37, "bias+relu").failure, "");
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_GE(got.data<float>()[i], 0.f);
}

}  // namespace
}  // namespace kiln
