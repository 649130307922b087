// Resize of the convolution and batch norm kernels of the JIT
// (compiler/kernels/onednn/onednn_kernels.h, batch_norm_kernels.h): a kernel
// made for one input shape, resized to other batches (1 among them) and
// image sizes (odd ones, with tails of the channel blocks' rows), runs as a
// kernel made for the new shape, with plain and kept (nChw8c, nChw16c, nhwc)
// layouts; other channels, filters or outputs are refused with the reason.
// The matmul kernels: onednn_resize_test.
#include <gtest/gtest.h>

#include <random>

#include "compiler/codegen/isa.h"
#include "compiler/kernels/onednn/batch_norm_kernels.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "tests/bf16_util.h"
#include "tests/resize_test_util.h"

namespace kiln::jit {
namespace {

using namespace resize_test;  // NOLINT

constexpr ActLayout kLayouts[] = {ActLayout::kPlain, ActLayout::kNChw8c, ActLayout::kNChw16c, ActLayout::kNhwc};
const std::vector<Dims> kInputs = {{1, 16, 9, 9}, {3, 16, 7, 11}, {2, 16, 16, 16}, {1, 16, 3, 3}, {5, 16, 12, 5}};

FusedConvSpec Conv(const Dims& input, ActLayout layout, bool bias) {
  FusedConvSpec s;
  s.input_dims = input;
  s.filter_dims = {16, 16, 3, 3};
  s.strides = {1, 1};
  s.paddings = {1, 1};
  s.dilations = {1, 1};
  s.bias = bias;
  s.activation = bias ? MatmulActivation::kRelu : MatmulActivation::kNone;
  s.dst_layout = layout;
  return s;
}

Dims OutOf(const Dims& in) { return {in[0], 16, in[2], in[3]}; }

// nChw16c is what AVX-512 convolutions write; elsewhere oneDNN has only its
// reference forward for it, which the kernels refuse.
bool ForwardRunsIn(ActLayout layout) { return layout != ActLayout::kNChw16c || IsaSupported(Isa::kAvx512); }

TEST(ConvResizeTest, ResizedConvolutionsMatchFreshKernels) {
  std::mt19937 rng(31);
  for (ActLayout layout : kLayouts) {
    if (!ForwardRunsIn(layout)) continue;
    for (bool bias : {false, true}) {
      auto kernel = MakeFusedConvKernel(Conv({2, 16, 8, 8}, layout, bias), onednn::Settings{}, "conv_0");
      for (const Dims& in : kInputs) {
        std::vector<Arg> a = {RandomArg(in, DataType::kFP32, rng), RandomArg({16, 16, 3, 3}, DataType::kFP32, rng)};
        if (bias) a.push_back(RandomArg({16}, DataType::kFP32, rng));
        a.push_back(ZeroArg(ActStoredDims(layout, OutOf(in))));
        auto fresh = MakeFusedConvKernel(Conv(in, layout, bias), onednn::Settings{}, "conv_0");
        EXPECT_EQ(ResizedMatchesFresh(*kernel, *fresh, a), "") << DimsToString(in) << " " << ActLayoutName(layout);
      }
    }
  }
}

TEST(ConvResizeTest, ResizedGradientsMatchFreshKernels) {
  std::mt19937 rng(32);
  for (ActLayout layout : kLayouts) {
    for (bool dinput : {false, true}) {
      const bool dbias = !dinput;
      auto kernel = MakeConvGradKernel(Conv({2, 16, 8, 8}, layout, false), dinput, dbias, onednn::Settings{}, "cg_0");
      for (const Dims& in : kInputs) {
        std::vector<Arg> a = {RandomArg(in, DataType::kFP32, rng), RandomArg({16, 16, 3, 3}, DataType::kFP32, rng),
                              RandomArg(ActStoredDims(layout, OutOf(in)), DataType::kFP32, rng)};
        if (dinput) a.push_back(ZeroArg(in));
        a.push_back(ZeroArg({16, 16, 3, 3}));
        if (dbias) a.push_back(ZeroArg({16}));
        auto fresh = MakeConvGradKernel(Conv(in, layout, false), dinput, dbias, onednn::Settings{}, "cg_0");
        EXPECT_EQ(ResizedMatchesFresh(*kernel, *fresh, a, {}, 1e-4), "") << DimsToString(in) << " "
                                                                         << ActLayoutName(layout);
      }
    }
  }
}

TEST(ConvResizeTest, Bf16ConvolutionsAndGradientsOfABf16DyResize) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(34);
  for (ActLayout layout : {ActLayout::kNChw16c, ActLayout::kNhwc}) {
    FusedConvSpec made = Conv({2, 16, 8, 8}, layout, true);
    made.compute = ComputeType::kBF16;
    auto fwd = MakeFusedConvKernel(made, onednn::Settings{}, "conv_0");
    auto grad = MakeConvGradKernel(made, true, true, onednn::Settings{}, "cg_0", DataType::kBF16);
    for (const Dims& in : kInputs) {
      FusedConvSpec s = made;
      s.input_dims = in;
      const Dims out = ActStoredDims(layout, OutOf(in));
      std::vector<Arg> a = {RandomArg(in, DataType::kFP32, rng), RandomArg({16, 16, 3, 3}, DataType::kFP32, rng),
                            RandomArg({16}, DataType::kFP32, rng), ZeroArg(out)};
      EXPECT_EQ(ResizedMatchesFresh(*fwd, *MakeFusedConvKernel(s, onednn::Settings{}, "conv_0"), a), "")
          << DimsToString(in) << " " << ActLayoutName(layout);
      std::vector<Arg> g = {RandomArg(in, DataType::kFP32, rng), RandomArg({16, 16, 3, 3}, DataType::kFP32, rng),
                            RandomArg(out, DataType::kBF16, rng), ZeroArg(in), ZeroArg({16, 16, 3, 3}), ZeroArg({16})};
      auto fresh = MakeConvGradKernel(s, true, true, onednn::Settings{}, "cg_0", DataType::kBF16);
      EXPECT_EQ(ResizedMatchesFresh(*grad, *fresh, g, {}, 1e-4), "") << DimsToString(in) << " " << ActLayoutName(layout);
    }
  }
}

TEST(ConvResizeTest, RefusesOtherChannelsFiltersAndOutputs) {
  const ActLayout layout = ForwardRunsIn(ActLayout::kNChw16c) ? ActLayout::kNChw16c : ActLayout::kNChw8c;
  auto kernel = MakeFusedConvKernel(Conv({2, 16, 8, 8}, layout, true), onednn::Settings{}, "conv_0");
  std::string why;
  const Dims f = {16, 16, 3, 3}, out = ActStoredDims(layout, {1, 16, 5, 6});
  EXPECT_NE(kernel->Resize({{1, 16, 5, 6}, f, {16}, out}, &why), nullptr) << why;
  EXPECT_EQ(kernel->Resize({{1, 8, 5, 6}, f, {16}, out}, &why), nullptr);
  EXPECT_EQ(why, "conv_0: Input must be [N, 16, H, W] (the channels it was made for) without a zero dim, got [1,8,5,6]");
  EXPECT_EQ(kernel->Resize({{1, 16, 5, 6}, {16, 16, 5, 5}, {16}, out}, &why), nullptr);
  EXPECT_EQ(why, "conv_0: argument 1 must be [16,16,3,3], got [16,16,5,5]");
  EXPECT_EQ(kernel->Resize({{1, 16, 5, 6}, f, {16}, {1, 16, 5, 6}}, &why), nullptr);
  EXPECT_EQ(why, "conv_0: argument 3 must be " + DimsToString(out) + ", got [1,16,5,6]");
  // Unpadded, a 3x3 window does not fit a 1-pixel-high input.
  FusedConvSpec tight = Conv({2, 16, 8, 8}, ActLayout::kPlain, false);
  tight.paddings = {0, 0};
  auto t = MakeFusedConvKernel(tight, onednn::Settings{}, "conv_1");
  EXPECT_EQ(t->Resize({{1, 16, 1, 6}, f, {1, 16, 0, 4}}, &why), nullptr);
  EXPECT_EQ(why, "conv_1: the 3-wide window does not fit Input [1,16,1,6]");
  auto grad = MakeConvGradKernel(Conv({2, 16, 8, 8}, ActLayout::kPlain, false), true, false, onednn::Settings{}, "cg");
  EXPECT_EQ(grad->Resize({{1, 16, 5, 6}, f, {1, 16, 5, 6}, {1, 16, 5, 7}, f}, &why), nullptr);
  EXPECT_EQ(why, "cg: argument 3 must be [1,16,5,6], got [1,16,5,7]");
}

// X, Scale, Bias, Mean, Variance -> Y, MeanOut, VarianceOut, SavedMean,
// SavedVariance[, mask]; Mean and Variance updated in place.
std::vector<Arg> BatchNormArgs(const BatchNormSpec& s, std::mt19937& rng) {
  std::vector<Arg> a = {RandomArg(ActStoredDims(s.layout, s.x_dims), DataType::kFP32, rng)};
  for (int i = 0; i < 4; ++i) a.push_back(RandomArg({16}, DataType::kFP32, rng, 0.5f, 1.5f));
  a.push_back(ZeroArg(ActStoredDims(s.y_layout, s.x_dims)));
  for (int i = 0; i < 4; ++i) a.push_back(ZeroArg({16}));
  if (s.fuse_relu) a.push_back(ZeroArg({BatchNormReluMaskBytes(s)}, DataType::kBOOL));
  return a;
}

// X, Scale, SavedMean, SavedVariance, dY[, mask] -> dX, dScale, dBias.
std::vector<Arg> BatchNormGradArgs(const BatchNormSpec& s, std::mt19937& rng) {
  std::vector<Arg> a = {RandomArg(ActStoredDims(s.layout, s.x_dims), DataType::kFP32, rng)};
  for (int i = 0; i < 3; ++i) a.push_back(RandomArg({16}, DataType::kFP32, rng, 0.5f, 1.5f));
  a.push_back(RandomArg(ActStoredDims(s.y_layout, s.x_dims), DataType::kFP32, rng));
  if (s.fuse_relu) {
    Arg mask = ZeroArg({BatchNormReluMaskBytes(s)}, DataType::kBOOL);
    for (size_t i = 0; i < mask.bytes.size(); ++i) mask.bytes[i] = static_cast<uint8_t>(rng() % 2);
    a.push_back(mask);
  }
  a.push_back(ZeroArg(ActStoredDims(s.layout, s.x_dims)));
  a.push_back(ZeroArg({16}));
  a.push_back(ZeroArg({16}));
  return a;
}

TEST(BatchNormResizeTest, ResizedKernelsMatchFreshKernels) {
  std::mt19937 rng(33);
  for (ActLayout layout : {ActLayout::kNChw8c, ActLayout::kNChw16c, ActLayout::kNhwc}) {
    // nChw16c is what AVX-512 convolutions write; elsewhere no chain keeps
    // it (and oneDNN's batch norm there has no bit-per-element relu mask).
    if (layout == ActLayout::kNChw16c && !IsaSupported(Isa::kAvx512)) continue;
    for (int mode = 0; mode < 3; ++mode) {
      BatchNormSpec made;
      made.x_dims = {2, 16, 8, 8};
      made.layout = layout;
      made.y_layout = mode == 1 ? ActLayout::kPlain : layout;
      made.fuse_relu = mode == 2;
      auto fwd = MakeBatchNormKernel(made, onednn::Settings{}, "bn_0");
      auto bwd = MakeBatchNormGradKernel(made, true, true, onednn::Settings{}, "bn_grad_0");
      for (const Dims& in : kInputs) {
        BatchNormSpec s = made;
        s.x_dims = in;
        const std::vector<int> in_place = {0, 1, 2, 3, 4, 5, 3, 4, 8, 9, 10};  // MeanOut, VarianceOut over Mean, Variance
        std::vector<int> bind(in_place.begin(), in_place.begin() + (s.fuse_relu ? 11 : 10));
        const std::string what = DimsToString(in) + " " + ActLayoutName(layout) + " mode " + std::to_string(mode);
        EXPECT_EQ(ResizedMatchesFresh(*fwd, *MakeBatchNormKernel(s, onednn::Settings{}, "bn_0"),
                                      BatchNormArgs(s, rng), bind, 1e-4),
                  "")
            << what;
        EXPECT_EQ(ResizedMatchesFresh(*bwd, *MakeBatchNormGradKernel(s, true, true, onednn::Settings{}, "bn_grad_0"),
                                      BatchNormGradArgs(s, rng), {}, 1e-4),
                  "")
            << what;
      }
    }
  }
}

TEST(BatchNormResizeTest, RefusesOtherChannelsAndMismatchedArguments) {
  BatchNormSpec s;
  s.x_dims = {2, 16, 8, 8};
  s.layout = ActLayout::kNChw8c;
  s.fuse_relu = true;
  auto fwd = MakeBatchNormKernel(s, onednn::Settings{}, "bn_0");
  std::string why;
  const Dims c = {16};
  // The relu mask: a bit for each of the 400 elements.
  std::vector<Dims> dims = {{1, 2, 5, 5, 8}, c, c, c, c, {1, 16, 5, 5}, c, c, c, c, {50}};
  EXPECT_NE(fwd->Resize(dims, &why), nullptr) << why;
  dims[0] = {1, 3, 5, 5, 8};
  EXPECT_EQ(fwd->Resize(dims, &why), nullptr);
  EXPECT_EQ(why, "bn_0: X must be an [N, 16, H, W] activation stored in nChw8c without a zero dim, got [1,3,5,5,8]");
  dims[0] = {1, 2, 5, 5, 8};
  dims[10] = {200};
  EXPECT_EQ(fwd->Resize(dims, &why), nullptr);
  EXPECT_EQ(why, "bn_0: argument 10 must be [50], got [200]");
  auto bwd = MakeBatchNormGradKernel(s, false, true, onednn::Settings{}, "bn_grad_0");
  EXPECT_NE(bwd->Resize({{3, 2, 4, 4, 8}, c, c, c, {3, 16, 4, 4}, {96}, {3, 2, 4, 4, 8}, c}, &why), nullptr) << why;
  EXPECT_EQ(bwd->Resize({{3, 2, 4, 4, 8}, c, c, c, {3, 16, 4, 4}, {96}, {3, 2, 4, 4, 8}, c, c}, &why), nullptr);
  EXPECT_EQ(why, "bn_grad_0: expected dims for 8 arguments, got 9");
}

}  // namespace
}  // namespace kiln::jit
