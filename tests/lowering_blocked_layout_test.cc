// Lowering step blocked_layout (compiler/lowering/blocked_layout.h): a
// conv + bias + relu whose output is max-pooled keeps that output, and the
// gradients flowing back into the conv, in the layout oneDNN writes
// (nChw16c, nChw8c or nhwc).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "compiler/kernels/blocked_pool.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "framework/bf16.h"
#include "tests/bf16_util.h"
#include "tests/lowering_test_util.h"
#include "tests/program_resize_util.h"

namespace kiln::test {
namespace {

// conv2d (3x3, pad 1) + bias + relu -> act, 2x2 max pool -> p, and the
// backward of that from dp: pool2d_grad, relu_grad, elementwise_add_grad,
// conv2d_grad (dx when `want_dx`). `pool_k` is the pooling window and stride.
LoweringCase ConvPoolChain(const std::string& name, Dims x, Dims f, bool want_dx, int64_t pool_k = 2) {
  LoweringCase c = ConvBiasAct(name, true, "relu", x, f, 1, 1, 1);
  const std::vector<int64_t> window = {pool_k, pool_k}, strides = {1, 1}, pads = {1, 1};
  c.ops.push_back(
      OpBuilder("pool2d").In("X", {"act"}).Out("Out", {"p"}).Attr("ksize", window).Attr("strides", window).Build());
  c.ops.push_back(OpBuilder("pool2d_grad")
                      .In("X", {"act"})
                      .In("Out", {"p"})
                      .In("Out@GRAD", {"dp"})
                      .Out("X@GRAD", {"dact"})
                      .Attr("ksize", window)
                      .Attr("strides", window)
                      .Build());
  c.ops.push_back(OpBuilder("relu_grad").In("Out", {"act"}).In("Out@GRAD", {"dact"}).Out("X@GRAD", {"dsum"}).Build());
  c.ops.push_back(BiasAddGradOp());
  OpBuilder g("conv2d_grad");
  g.In("Input", {"x"}).In("Filter", {"f"}).In("Output@GRAD", {"dconv"}).Out("Filter@GRAD", {"df"});
  g.Out("Input@GRAD", {want_dx ? "dx" : kEmptyVarName});
  c.ops.push_back(g.Attr("strides", strides).Attr("paddings", pads).Attr("groups", int64_t{1}).Build());
  const Dims p = {x[0], f[0], x[2] / pool_k, x[3] / pool_k};
  c.inputs.push_back({"dp", p});
  c.outputs = {"p", "df", "db"};
  if (want_dx) c.outputs.push_back("dx");
  return c;
}

// ConvPoolChain (no dx) and a second chain on its pooled output p: conv2d
// (3x3, pad 1, filter f2) + bias b2 + relu -> act2, pool -> p2, and the
// backward from dp2 down to the second conv's gradient, whose dInput is dp,
// the first chain's pooled gradient (a LeNet's two layers).
LoweringCase TwoConvPoolChains(const std::string& name, Dims x, Dims f, Dims f2) {
  LoweringCase c = ConvPoolChain(name, x, f, false);
  const std::vector<int64_t> window = {2, 2}, ones = {1, 1};
  std::vector<proto::OpDesc> second;
  second.push_back(OpBuilder("conv2d")
                      .In("Input", {"p"})
                      .In("Filter", {"f2"})
                      .Out("Output", {"conv2"})
                      .Attr("strides", ones)
                      .Attr("paddings", ones)
                      .Attr("groups", int64_t{1})
                      .Build());
  second.push_back(OpBuilder("elementwise_add")
                      .In("X", {"conv2"})
                      .In("Y", {"b2"})
                      .Out("Out", {"sum2"})
                      .Attr("axis", int64_t{1})
                      .Build());
  second.push_back(OpBuilder("relu").In("X", {"sum2"}).Out("Out", {"act2"}).Build());
  second.push_back(
      OpBuilder("pool2d").In("X", {"act2"}).Out("Out", {"p2"}).Attr("ksize", window).Attr("strides", window).Build());
  second.push_back(OpBuilder("pool2d_grad")
                      .In("X", {"act2"})
                      .In("Out", {"p2"})
                      .In("Out@GRAD", {"dp2"})
                      .Out("X@GRAD", {"dact2"})
                      .Attr("ksize", window)
                      .Attr("strides", window)
                      .Build());
  second.push_back(
      OpBuilder("relu_grad").In("Out", {"act2"}).In("Out@GRAD", {"dact2"}).Out("X@GRAD", {"dsum2"}).Build());
  second.push_back(OpBuilder("elementwise_add_grad")
                      .In("Y", {"b2"})
                      .In("Out@GRAD", {"dsum2"})
                      .Out("X@GRAD", {"dconv2"})
                      .Out("Y@GRAD", {"db2"})
                      .Attr("axis", int64_t{1})
                      .Build());
  second.push_back(OpBuilder("conv2d_grad")
                      .In("Input", {"p"})
                      .In("Filter", {"f2"})
                      .In("Output@GRAD", {"dconv2"})
                      .Out("Input@GRAD", {"dp"})
                      .Out("Filter@GRAD", {"df2"})
                      .Attr("strides", ones)
                      .Attr("paddings", ones)
                      .Attr("groups", int64_t{1})
                      .Build());
  // The first chain's forward (4 ops), the second chain, the first's backward.
  c.ops.insert(c.ops.begin() + 4, second.begin(), second.end());
  c.inputs.erase(std::find_if(c.inputs.begin(), c.inputs.end(), [](const auto& in) { return in.first == "dp"; }));
  c.inputs.push_back({"f2", f2});
  c.inputs.push_back({"b2", {f2[0]}});
  c.inputs.push_back({"dp2", {x[0], f2[0], x[2] / 4, x[3] / 4}});
  c.outputs = {"p2", "df", "db", "df2", "db2"};
  return c;
}

// The layout oneDNN's forward writes for the chain's conv (3x3, pad 1, bias,
// relu) on this CPU: what the step keeps, kPlain when it does not fire.
ActLayout ChainLayout(const Dims& x, const Dims& f, ComputeType compute) {
  jit::FusedConvSpec spec;
  spec.input_dims = x;
  spec.filter_dims = f;
  spec.strides = spec.paddings = spec.dilations = {1, 1};
  spec.bias = true;
  spec.activation = jit::MatmulActivation::kRelu;
  spec.compute = compute;
  return jit::ConvForwardDstLayout(spec, onednn::Settings{});
}

// Numerics, and that the step fired exactly when oneDNN writes a layout it keeps.
void CheckChain(const LoweringCase& c, const Dims& x, const Dims& f, double atol, double rtol, unsigned seed = 1) {
  const auto obj = CheckLoweringNumerics(c, atol, rtol, seed);
  const ActLayout layout = ChainLayout(x, f, c.options.amp_compute);
  EXPECT_EQ(StepMatched(*obj, "blocked_layout"), layout != ActLayout::kPlain) << obj->lowering;
  if (layout == ActLayout::kPlain) return;
  EXPECT_NE(obj->lowering.find(std::string("kept in ") + ActLayoutName(layout)), std::string::npos) << obj->lowering;
  // The conv writes its dst in its own layout: the kernel names no dst
  // reorder (the filter's stays; the backward primitives reorder diff_dst
  // only when their fastest layout for the shape is another).
  const std::string listing = obj->Listing();
  EXPECT_NE(listing.find(std::string("relu gradient, X and dX in ") + ActLayoutName(layout)), std::string::npos)
      << listing;
  EXPECT_EQ(listing.find("reorders dst"), std::string::npos) << listing;
  EXPECT_EQ(listing.find(", dst)"), std::string::npos) << listing;
}

TEST(BlockedLayoutTest, ConvReluPoolAndTheirGradientsStayBlocked) {
  // 6 channels: one block of 16 (or 8), 10 (or 2) padded lanes.
  const Dims x = {3, 2, 10, 8}, f = {6, 2, 3, 3};
  const LoweringCase c = ConvPoolChain("blocked_layout", x, f, true);
  // The golden is an AVX-512 CPU's, where oneDNN writes nChw16c.
  if (ChainLayout(x, f, ComputeType::kF32) == ActLayout::kNChw16c) CheckLoweringGolden(c);
  CheckChain(c, x, f, 1e-4, 1e-5);
  // 19 channels: a whole block and a tail; no input gradient.
  const Dims x2 = {2, 3, 6, 12}, f2 = {19, 3, 3, 3};
  CheckChain(ConvPoolChain("blocked_two_blocks", x2, f2, false), x2, f2, 1e-4, 1e-5, 7);
}

// The layout the second chain's conv gradient picks for dp (p plain, its dY
// kept in the second chain's layout).
ActLayout PooledGradLayoutFor(const Dims& p, const Dims& f2) {
  jit::FusedConvSpec spec;
  spec.input_dims = p;
  spec.filter_dims = f2;
  spec.strides = spec.paddings = spec.dilations = {1, 1};
  spec.bias = true;
  spec.activation = jit::MatmulActivation::kRelu;
  spec.dst_layout = ChainLayout(p, f2, ComputeType::kF32);
  return jit::ConvBackwardDInputLayout(spec, onednn::Settings{});
}

// The first chain's pooled gradient dp, written by the second conv's data
// gradient and read by the first chain's pooling gradient, is kept in the
// first chain's layout where the data gradient picks that layout itself:
// no diff_src reorder, and the pooling gradient reads it grouped.
TEST(BlockedLayoutTest, ThePooledGradientBetweenTwoChainsStaysBlocked) {
  // LeNet's channels (1 -> 6 -> 16; 6 a partial block), and 2 -> 9 -> 5.
  for (const auto& [x, f, f2] : std::vector<std::array<Dims, 3>>{{Dims{2, 1, 12, 12}, Dims{6, 1, 3, 3}, Dims{16, 6, 3, 3}},
                                                                 {Dims{3, 2, 8, 8}, Dims{9, 2, 3, 3}, Dims{5, 9, 3, 3}}}) {
    const LoweringCase c = TwoConvPoolChains("blocked_layout_pooled_grad", x, f, f2);
    const auto obj = CheckLoweringNumerics(c, 1e-4, 1e-5, 3);
    const Dims p = {x[0], f[0], x[2] / 2, x[3] / 2};
    const ActLayout layout = ChainLayout(x, f, ComputeType::kF32);
    const bool kept = layout != ActLayout::kPlain && ChainLayout(p, f2, ComputeType::kF32) != ActLayout::kPlain &&
                      PooledGradLayoutFor(p, f2) == layout;
    EXPECT_EQ(obj->lowering.find("dp kept in ") != std::string::npos, kept) << obj->lowering;
    // LeNet's layers: where the first chain fires, oneDNN's data gradient
    // picks its layout for dp on every CPU measured (nChw8c on an AVX2 AMD
    // Zen 3, nChw16c on an AVX-512 Xeon).
    if (f[0] == 6 && layout != ActLayout::kPlain) {
      EXPECT_TRUE(kept) << ActLayoutName(layout);
    }
    if (!kept) continue;
    const std::string listing = obj->Listing();
    EXPECT_NE(listing.find("dOut too"), std::string::npos) << listing;
    EXPECT_EQ(listing.find("diff_src"), std::string::npos) << listing;
    // These goldens are an AVX2 CPU's, where oneDNN writes nChw8c.
    if (layout == ActLayout::kNChw8c && f[0] == 6) CheckLoweringGolden(c);
  }
}

// Must not fire: dp leaves the cluster (and so has a reader outside the pattern).
TEST(BlockedLayoutTest, ThePooledGradientStaysPlainWhenItLeavesTheCluster) {
  LoweringCase c = TwoConvPoolChains("blocked_layout_pooled_grad_not_fired", {2, 1, 12, 12}, {6, 1, 3, 3}, {16, 6, 3, 3});
  c.outputs.push_back("dp");
  if (ChainLayout({2, 1, 12, 12}, {6, 1, 3, 3}, ComputeType::kF32) == ActLayout::kNChw8c) CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 1e-4, 1e-5);
  EXPECT_EQ(obj->lowering.find("dp kept in "), std::string::npos) << obj->lowering;
}

TEST(BlockedLayoutTest, RunsWithBf16Convolutions) {
  KILN_SKIP_WITHOUT_BF16();
  // With AMX oneDNN's bf16 forward writes channels-last, which the step keeps.
  const Dims x = {2, 3, 8, 6}, f = {5, 3, 3, 3};
  LoweringCase c = ConvPoolChain("blocked_bf16", x, f, true);
  c.options.amp_compute = ComputeType::kBF16;
  // dW sums over N*H*W = 96 bf16 products. The bias gradient is a reduction
  // and stays f32: summed before the gradient is rounded to bf16.
  c.output_atol["db"] = 1e-4;
  CheckChain(c, x, f, Bf16Atol(96), 0);
}

TEST(BlockedLayoutTest, DoesNotFireWhenTheActivationLeavesOrThePoolIsNotTwoByTwo) {
  LoweringCase leaves = ConvPoolChain("blocked_layout_not_fired", {2, 2, 6, 6}, {4, 2, 3, 3}, false);
  leaves.outputs.push_back("act");
  CheckLoweringGolden(leaves);
  const auto obj = CheckLoweringNumerics(leaves, 1e-4, 1e-5);
  EXPECT_FALSE(StepMatched(*obj, "blocked_layout")) << obj->lowering;
  const auto three = CheckLoweringNumerics(ConvPoolChain("blocked_pool3", {2, 2, 6, 6}, {4, 2, 3, 3}, false, 3),
                                           1e-4, 1e-5);
  EXPECT_FALSE(StepMatched(*three, "blocked_layout")) << three->lowering;
}

// The gradient kernels given dOut grouped as dX (its padded lanes hold
// garbage, not read): the same bits as from the plain dOut (dx; dx16 and db
// with relu's gradient in bf16).
void ExpectGroupedDoutGivesTheSame(const std::vector<uint8_t>& argmax, const std::vector<float>& dout,
                                   const std::vector<float>& dx, const std::vector<uint16_t>& dx16,
                                   const std::vector<float>& db, int64_t n, int64_t ch, int64_t h, int64_t w,
                                   int64_t b) {
  const int64_t cb = (ch + b - 1) / b, oh = h / 2, ow = w / 2;
  std::vector<float> grouped(n * cb * oh * ow * b, 9.f), dxg(dx.size(), 5.f), dbg(ch, -1.f);
  for (int64_t img = 0; img < n; ++img) {
    for (int64_t k = 0; k < ch; ++k) {
      for (int64_t s = 0; s < oh * ow; ++s) {
        grouped[((img * cb + k / b) * oh * ow + s) * b + k % b] = dout[(img * ch + k) * oh * ow + s];
      }
    }
  }
  jit::MaxPool2x2GradPlainToBlocked(argmax.data(), grouped.data(), dxg.data(), n, ch, h, w, b,
                                    jit::PoolGradThen::kNothing, jit::PooledGradLayout::kGrouped);
  EXPECT_EQ(dxg, dx) << "b " << b;
  std::vector<uint16_t> dx16g(dx16.size(), 1);
  jit::MaxPool2x2GradPlainToBlockedBf16(argmax.data(), grouped.data(), dx16g.data(), n, ch, h, w, b,
                                        jit::PoolGradThen::kReluGrad, dbg.data(), jit::PooledGradLayout::kGrouped);
  EXPECT_EQ(dx16g, dx16) << "b " << b;
  EXPECT_EQ(dbg, db) << "b " << b;
}

// The kernels against the plain definitions, with ties, NaN and every
// kept layout's channel group.
TEST(BlockedLayoutTest, BlockedPoolKernelsMatchThePlainDefinition) {
  const int64_t n = 2, ch = 11;
  // w = 262: 131 windows a row, three passes of the 64-window scratch.
  for (const auto& [h, w, b] : std::vector<std::array<int64_t, 3>>{
           {4, 6, 8}, {4, 6, 16}, {4, 6, ch}, {2, 262, 16}, {2, 262, ch}}) {  // nChw8c, nChw16c, nhwc
    const int64_t cb = (ch + b - 1) / b;
    std::vector<float> plain(n * ch * h * w), blocked(n * cb * h * w * b, 0.f);
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<float>((i * 7919) % 5) - 2.f;  // many ties
    plain[3] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t img = 0; img < n; ++img) {
      for (int64_t k = 0; k < ch; ++k) {
        for (int64_t s = 0; s < h * w; ++s) {
          blocked[((img * cb + k / b) * h * w + s) * b + k % b] = plain[(img * ch + k) * h * w + s];
        }
      }
    }
    std::vector<float> out(n * ch * (h / 2) * (w / 2)), dout(out.size()), dx(blocked.size(), 5.f);
    std::vector<uint8_t> argmax(n * cb * (h / 2) * (w / 2) * b, 0xff);
    jit::MaxPool2x2BlockedToPlain(blocked.data(), out.data(), argmax.data(), n, ch, h, w, b);
    for (size_t i = 0; i < dout.size(); ++i) dout[i] = 1.f + static_cast<float>(i) / 3.f;  // not all exact in bf16
    // The gradient reads only the argmax and dOut: X's memory may be reused.
    std::vector<float> x_saved = blocked;
    std::fill(blocked.begin(), blocked.end(), -7.f);
    jit::MaxPool2x2GradPlainToBlocked(argmax.data(), dout.data(), dx.data(), n, ch, h, w, b);
    blocked = x_saved;
    // With relu's gradient, stored in bf16: the same routing, zero where x <= 0, rounded as framework/bf16.h.
    // And the bias gradient: the f32 sum per channel of the values before rounding.
    std::vector<uint16_t> dx16(blocked.size(), 1);
    std::vector<float> db(ch, -1.f);
    std::vector<double> want_db(ch, 0.0);
    jit::MaxPool2x2GradPlainToBlockedBf16(argmax.data(), dout.data(), dx16.data(), n, ch, h, w, b,
                                          jit::PoolGradThen::kReluGrad, db.data());
    for (size_t i = 0; i < dx.size(); ++i) {
      const float want = blocked[i] > 0.f ? dx[i] : 0.f;
      ASSERT_EQ(dx16[i], FloatToBf16Bits(want)) << "element " << i << " b " << b;
      const int64_t lane = static_cast<int64_t>(i) % b, group = static_cast<int64_t>(i) / (h * w * b) % cb;
      if (group * b + lane < ch) want_db[group * b + lane] += want;
    }
    for (int64_t k = 0; k < ch; ++k) EXPECT_NEAR(db[k], want_db[k], 1e-4 * (1 + std::fabs(want_db[k]))) << k;
    ExpectGroupedDoutGivesTheSame(argmax, dout, dx, dx16, db, n, ch, h, w, b);
    for (int64_t img = 0; img < n; ++img) {
      for (int64_t k = 0; k < cb * b; ++k) {
        for (int64_t i = 0; i < h / 2; ++i) {
          for (int64_t j = 0; j < w / 2; ++j) {
            float* d[4];
            int first = -1;
            bool nan = false;
            float m = -INFINITY;
            for (int q = 0; q < 4; ++q) {
              const int64_t y = 2 * i + q / 2, x = 2 * j + q % 2;
              d[q] = &dx[((img * cb + k / b) * h * w + y * w + x) * b + k % b];
              if (k >= ch) continue;
              const float v = plain[(img * ch + k) * h * w + y * w + x];
              if (std::isnan(v) && !nan) {
                nan = true;
                m = v;
              }
              if (!nan && v > m) m = v;
            }
            if (k >= ch) {
              for (float* p : d) EXPECT_EQ(*p, 0.f) << "padded lane " << k;
              continue;
            }
            const int64_t o = ((img * ch + k) * (h / 2) + i) * (w / 2) + j;
            EXPECT_TRUE(nan ? std::isnan(out[o]) : out[o] == m) << "window " << o << " b " << b;
            for (int q = 0; q < 4 && first < 0; ++q) {
              const int64_t y = 2 * i + q / 2, x = 2 * j + q % 2;
              if (plain[(img * ch + k) * h * w + y * w + x] == out[o]) first = q;
            }
            if (first < 0) first = 3;  // a NaN maximum: the window's last element, as the plain kernel
            for (int q = 0; q < 4; ++q) EXPECT_EQ(*d[q], q == first ? dout[o] : 0.f) << "window " << o << " q " << q;
          }
        }
      }
    }
  }
}

// Dynamic shapes: the chain's kernels compiled for one batch and image size,
// resized to others (batch 1, odd widths), as the compiled program would.
TEST(BlockedLayoutTest, KernelsResizeToOtherBatchesAndImageSizes) {
  const Dims f = {6, 2, 3, 3};
  std::vector<LoweringCase> others;
  for (const Dims& x : std::vector<Dims>{{1, 2, 10, 8}, {5, 2, 6, 14}, {2, 2, 2, 2}}) {
    others.push_back(ConvPoolChain("blocked_resize_" + DimsToString(x), x, f, true));
  }
  CheckResizedPrograms(ConvPoolChain("blocked_resize", {3, 2, 10, 8}, f, true), others, {"conv", "maxpool"}, 1e-4,
                       1e-5);
  // Two chains, with the pooled gradient kept between them (where it is).
  const Dims f1 = {6, 1, 3, 3}, f2 = {16, 6, 3, 3};
  std::vector<LoweringCase> two;
  for (const Dims& x : std::vector<Dims>{{1, 1, 8, 16}, {3, 1, 4, 4}}) {
    two.push_back(TwoConvPoolChains("blocked_resize_two_" + DimsToString(x), x, f1, f2));
  }
  CheckResizedPrograms(TwoConvPoolChains("blocked_resize_two", {2, 1, 12, 12}, f1, f2), two, {"conv", "maxpool"},
                       1e-4, 1e-5);
}

}  // namespace
}  // namespace kiln::test
