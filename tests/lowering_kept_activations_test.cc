// Lowering step kept_activations (compiler/lowering/kept_activations.h):
// activations between a resnet's batch norms, convolutions and residual
// sums stay in oneDNN's layout, and so do their gradients.
#include <gtest/gtest.h>

#include "compiler/kernels/onednn/onednn_kernels.h"
#include "tests/lowering_test_util.h"
#include "tests/program_resize_util.h"

namespace kiln::test {
namespace {

// conv2d(in, <p>f) -> <p>y, batch_norm -> <p>z, relu -> <p>r (when `relu`)
// in `fwd`; in `bwd` from d<p>r (or d<p>z): relu_grad, batch_norm_grad,
// conv2d_grad writing `din` (when given) and d<p>f.
struct ConvBn {
  std::vector<proto::OpDesc> fwd, bwd;
  std::string out, dout;
};

ConvBn MakeConvBn(const std::string& p, const std::string& in, const std::string& din, bool relu) {
  ConvBn b;
  const std::vector<int64_t> one = {1, 1};
  b.fwd.push_back(OpBuilder("conv2d")
                      .In("Input", {in})
                      .In("Filter", {p + "f"})
                      .Out("Output", {p + "y"})
                      .Attr("strides", one)
                      .Attr("paddings", one)
                      .Attr("groups", int64_t{1})
                      .Build());
  b.fwd.push_back(OpBuilder("batch_norm")
                      .In("X", {p + "y"})
                      .In("Scale", {p + "scale"})
                      .In("Bias", {p + "shift"})
                      .In("Mean", {p + "mean"})
                      .In("Variance", {p + "var"})
                      .Out("Y", {p + "z"})
                      .Out("MeanOut", {p + "mean"})
                      .Out("VarianceOut", {p + "var"})
                      .Out("SavedMean", {p + "saved_mean"})
                      .Out("SavedVariance", {p + "saved_inv_std"})
                      .Attr("epsilon", 1e-5f)
                      .Attr("momentum", 0.9f)
                      .Attr("is_test", false)
                      .Build());
  b.out = relu ? p + "r" : p + "z";
  b.dout = "d" + b.out;
  if (relu) {
    b.fwd.push_back(OpBuilder("relu").In("X", {p + "z"}).Out("Out", {p + "r"}).Build());
    b.bwd.push_back(OpBuilder("relu_grad")
                        .In("Out", {p + "r"})
                        .In("Out@GRAD", {b.dout})
                        .Out("X@GRAD", {"d" + p + "z"})
                        .Build());
  }
  b.bwd.push_back(OpBuilder("batch_norm_grad")
                      .In("X", {p + "y"})
                      .In("Scale", {p + "scale"})
                      .In("SavedMean", {p + "saved_mean"})
                      .In("SavedVariance", {p + "saved_inv_std"})
                      .In("Y@GRAD", {"d" + p + "z"})
                      .Out("X@GRAD", {"d" + p + "y"})
                      .Out("Scale@GRAD", {"d" + p + "scale"})
                      .Out("Bias@GRAD", {"d" + p + "shift"})
                      .Attr("epsilon", 1e-5f)
                      .Attr("is_test", false)
                      .Build());
  b.bwd.push_back(OpBuilder("conv2d_grad")
                      .In("Input", {in})
                      .In("Filter", {p + "f"})
                      .In("Output@GRAD", {"d" + p + "y"})
                      .Out("Input@GRAD", {din.empty() ? kEmptyVarName : din})
                      .Out("Filter@GRAD", {"d" + p + "f"})
                      .Attr("strides", one)
                      .Attr("paddings", one)
                      .Attr("groups", int64_t{1})
                      .Build());
  return b;
}

// Two conv + batch norm layers, 3x3 convs of stride 1 and padding 1, the
// first with its relu: x [n, c0, h, w] -> a (c1 channels) -> b (c2), and
// their backward from db's gradient. The first layer's relu output ar is
// what the step keeps.
LoweringCase TwoLayers(const std::string& name, const Dims& x, int64_t c1, int64_t c2) {
  const ConvBn a = MakeConvBn("a", "x", "", true), b = MakeConvBn("b", a.out, a.dout, false);
  LoweringCase c;
  c.name = name;
  for (const auto* ops : {&a.fwd, &b.fwd, &b.bwd, &a.bwd}) c.ops.insert(c.ops.end(), ops->begin(), ops->end());
  c.inputs = {{"x", x}, {"af", {c1, x[1], 3, 3}}};
  for (const char* v : {"ascale", "ashift", "amean", "avar"}) c.inputs.push_back({v, {c1}});
  c.inputs.push_back({"bf", {c2, c1, 3, 3}});
  for (const char* v : {"bscale", "bshift", "bmean", "bvar"}) c.inputs.push_back({v, {c2}});
  c.inputs.push_back({b.dout, {x[0], c2, x[2], x[3]}});
  c.outputs = {b.out, "amean", "avar", "bmean", "bvar", "daf", "dbf", "dascale", "dashift", "dbscale", "dbshift"};
  return c;
}

// The inputs (filter, scale, shift, running statistics) and the outputs (the
// statistics updated, the gradients) of MakeConvBn(p, ...) with `filter`.
void AddConvBnInputs(LoweringCase* c, const std::string& p, const Dims& filter) {
  c->inputs.push_back({p + "f", filter});
  for (const char* v : {"scale", "shift", "mean", "var"}) c->inputs.push_back({p + v, {filter[0]}});
  for (const char* v : {"mean", "var", "dscale", "dshift", "df"}) {
    const std::string name = v;
    c->outputs.push_back(name[0] == 'd' ? "d" + p + name.substr(1) : p + name);
  }
}

// A resnet block of `ch` channels on `in` (gradient `din`, which it sums):
// relu(bn(conv(relu(bn(conv(in))))) + in) -> <p>o, and its backward from
// d<p>o.
ConvBn ResidualBlock(const std::string& p, const std::string& in, const std::string& din) {
  const ConvBn a = MakeConvBn(p + "a", in, "d" + in + "_" + p, true), b = MakeConvBn(p + "b", a.out, a.dout, false);
  ConvBn r;
  r.fwd = a.fwd;
  r.fwd.insert(r.fwd.end(), b.fwd.begin(), b.fwd.end());
  r.fwd.push_back(OpBuilder("elementwise_add").In("X", {b.out}).In("Y", {in}).Out("Out", {p + "sum"}).Build());
  r.fwd.push_back(OpBuilder("relu").In("X", {p + "sum"}).Out("Out", {p + "o"}).Build());
  r.out = p + "o";
  r.dout = "d" + p + "o";
  r.bwd.push_back(
      OpBuilder("relu_grad").In("Out", {r.out}).In("Out@GRAD", {r.dout}).Out("X@GRAD", {"d" + p + "sum"}).Build());
  r.bwd.push_back(OpBuilder("elementwise_add_grad")
                      .In("Y", {in})
                      .In("Out@GRAD", {"d" + p + "sum"})
                      .Out("X@GRAD", {b.dout})
                      .Out("Y@GRAD", {"d" + in + "_sc" + p})
                      .Build());
  r.bwd.insert(r.bwd.end(), b.bwd.begin(), b.bwd.end());
  r.bwd.insert(r.bwd.end(), a.bwd.begin(), a.bwd.end());
  r.bwd.push_back(OpBuilder("sum").In("X", {"d" + in + "_" + p, "d" + in + "_sc" + p}).Out("Out", {din}).Build());
  return r;
}

// A stem conv + batch norm + relu on x [n, c0, h, w] to `ch` channels,
// then `blocks` residual blocks of `ch` channels; the last block's output
// leaves, with its gradient given. Without the stem the first block reads
// x itself (c0 = ch), a cluster input, and x's gradient leaves.
LoweringCase Blocks(const std::string& name, const Dims& x, int64_t ch, int blocks, bool with_stem = true) {
  const ConvBn stem = MakeConvBn("s", "x", "", true);
  std::vector<ConvBn> bs;
  std::string in = with_stem ? stem.out : "x";
  for (int i = 0; i < blocks; ++i) {
    bs.push_back(ResidualBlock("k" + std::to_string(i), in, "d" + in));
    in = bs.back().out;
  }
  LoweringCase c;
  c.name = name;
  if (with_stem) c.ops = stem.fwd;
  for (const ConvBn& b : bs) c.ops.insert(c.ops.end(), b.fwd.begin(), b.fwd.end());
  for (auto b = bs.rbegin(); b != bs.rend(); ++b) c.ops.insert(c.ops.end(), b->bwd.begin(), b->bwd.end());
  if (with_stem) c.ops.insert(c.ops.end(), stem.bwd.begin(), stem.bwd.end());
  c.inputs = {{"x", x}};
  c.outputs = {in};
  if (with_stem) {
    AddConvBnInputs(&c, "s", {ch, x[1], 3, 3});
  } else {
    c.outputs.push_back("dx");
  }
  for (int i = 0; i < blocks; ++i) {
    for (const char* half : {"a", "b"}) AddConvBnInputs(&c, "k" + std::to_string(i) + half, {ch, ch, 3, 3});
  }
  c.inputs.push_back({"d" + in, {x[0], ch, x[2], x[3]}});
  return c;
}

// The layout oneDNN picks for the second conv's input, and for the first
// conv's output (the batch norm's).
ActLayout SecondConvInput(const Dims& x, int64_t c1, int64_t c2) {
  jit::FusedConvSpec spec;
  spec.input_dims = {x[0], c1, x[2], x[3]};
  spec.filter_dims = {c2, c1, 3, 3};
  spec.strides = spec.paddings = spec.dilations = {1, 1};
  return jit::ConvForwardSrcLayout(spec, onednn::Settings{});
}

ActLayout FirstConvOutput(const Dims& x, int64_t c1) {
  jit::FusedConvSpec spec;
  spec.input_dims = x;
  spec.filter_dims = {c1, x[1], 3, 3};
  spec.strides = spec.paddings = spec.dilations = {1, 1};
  return jit::ConvForwardDstLayout(spec, onednn::Settings{});
}

// The line of `listing` that begins with `prefix`; "" when none.
std::string LineOf(const std::string& listing, const std::string& prefix) {
  size_t at = listing.find(": " + prefix);
  if (at == std::string::npos) return "";
  at = listing.rfind('\n', at) + 1;
  return listing.substr(at, listing.find('\n', at) - at);
}

TEST(KeptActivationsTest, TheReluOutputBetweenTwoConvsStaysBlocked) {
  // 20 -> 17 channels: partial blocks; odd spatial sizes.
  const Dims x = {2, 5, 7, 9};
  const LoweringCase c = TwoLayers("kept_activations", x, 20, 17);
  const ActLayout in = SecondConvInput(x, 20, 17), out = FirstConvOutput(x, 20);
  if (in == ActLayout::kNChw16c && out == ActLayout::kNChw16c) CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 3e-4, 3e-4);
  const bool fires = in != ActLayout::kPlain && in == out;
  ASSERT_EQ(StepMatched(*obj, "kept_activations"), fires) << obj->lowering;
  if (!fires) return;
  // Neither the batch norm's output and its gradient nor the conv's input
  // and its gradient are reordered, and no kernel binds ar or dar plain.
  const std::string listing = obj->Listing();
  EXPECT_EQ(listing.find(":ar,"), std::string::npos) << listing;
  EXPECT_EQ(listing.find(":dar,"), std::string::npos) << listing;
  for (const char* kernel : {"batch_norm_0 (", "conv_1 (", "conv_grad_0 (", "batch_norm_grad_1 ("}) {
    const std::string line = LineOf(listing, kernel);
    ASSERT_FALSE(line.empty()) << kernel << "\n" << listing;
    for (const char* reorder : {"reorders dst", "reorders diff_dst", "src", "diff_src"}) {
      EXPECT_EQ(line.find(reorder, line.find('#')), std::string::npos) << line;
    }
  }
}

TEST(KeptActivationsTest, OddChannelCounts) {
  for (const auto& [c1, c2] : std::vector<std::pair<int64_t, int64_t>>{{6, 10}, {9, 8}, {17, 32}, {24, 33}, {32, 16}}) {
    const Dims x = {3, 4, 5, 6};
    SCOPED_TRACE(std::to_string(c1) + " -> " + std::to_string(c2));
    const auto obj = CheckLoweringNumerics(TwoLayers("kept_activations_odd", x, c1, c2), 3e-4, 3e-4, 7);
    const ActLayout in = SecondConvInput(x, c1, c2);
    EXPECT_EQ(StepMatched(*obj, "kept_activations"), in != ActLayout::kPlain && in == FirstConvOutput(x, c1))
        << obj->lowering;
  }
}

// Must not fire: the relu output leaves the cluster; another op reads it.
TEST(KeptActivationsTest, DoesNotFireWhenTheValueLeavesOrHasAnotherReader) {
  const Dims x = {2, 5, 7, 9};
  LoweringCase leaves = TwoLayers("kept_activations_not_fired", x, 20, 17);
  leaves.outputs.push_back("ar");
  // The golden is an AVX-512 CPU's, where oneDNN writes nChw16c.
  if (FirstConvOutput(x, 20) == ActLayout::kNChw16c) CheckLoweringGolden(leaves);
  auto obj = CheckLoweringNumerics(leaves, 3e-4, 3e-4);
  EXPECT_FALSE(StepMatched(*obj, "kept_activations")) << obj->lowering;
  EXPECT_EQ(StepMatched(*obj, "blocked_batch_norm"), FirstConvOutput(x, 20) != ActLayout::kPlain) << obj->lowering;

  LoweringCase plain = TwoLayers("kept_activations_plain_reader", x, 20, 17);
  plain.ops.insert(plain.ops.begin() + 5, OpBuilder("scale").In("X", {"ar"}).Out("Out", {"ar_scaled"}).Build());
  plain.outputs.push_back("ar_scaled");
  obj = CheckLoweringNumerics(plain, 3e-4, 3e-4);
  EXPECT_FALSE(StepMatched(*obj, "kept_activations")) << obj->lowering;
}

// The stem's relu output (read by the first block's convolution and its
// shortcut) and each block's output but the last stay kept; their
// gradients are summed kept.
TEST(KeptActivationsTest, ResidualBlocksKeepTheirInputsAndOutputs) {
  const Dims x = {2, 5, 6, 7};
  const LoweringCase one = Blocks("kept_activations_residual", x, 20, 1);
  const ActLayout in = SecondConvInput(x, 20, 20), out = FirstConvOutput(x, 20);
  // The golden is an AVX-512 CPU's, where oneDNN keeps nChw16c.
  if (in == ActLayout::kNChw16c && out == ActLayout::kNChw16c) CheckLoweringGolden(one);
  for (int blocks : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(blocks) + " blocks");
    const auto obj = CheckLoweringNumerics(Blocks("kept_activations_blocks", x, 20, blocks), 5e-4, 5e-4, blocks);
    if (in == ActLayout::kPlain || in != out) continue;  // numerics only: nothing to keep on this CPU
    const std::string listing = obj->Listing();
    // Kept: sr (the stem's), each block's first relu, each block output but
    // the last, and their gradients; a kept sum for each block's input.
    size_t sums = 0;
    for (size_t at = listing.find(": kept_sum_"); at != std::string::npos; at = listing.find(": kept_sum_", at + 1)) {
      ++sums;
    }
    EXPECT_EQ(sums, static_cast<size_t>(blocks)) << listing;
    EXPECT_EQ(listing.find("reorders dst to nchw"), std::string::npos) << listing;
    EXPECT_EQ(listing.find("reorders diff_dst from nchw"), std::string::npos) << listing;
    // The one src reordered is x's, into the stem's weight gradient.
    EXPECT_EQ(listing.find("diff_src"), std::string::npos) << listing;
    const size_t src = listing.find("reorders src");
    ASSERT_NE(src, std::string::npos) << listing;
    EXPECT_EQ(listing.find("reorders src", src + 1), std::string::npos) << listing;
    EXPECT_NE(listing.rfind("(%", src), std::string::npos);
    EXPECT_NE(listing.substr(listing.rfind('\n', src) + 1, 40).find(":x,"), std::string::npos) << listing;
  }
}

// A first block whose input is a cluster input: its sum reads the shortcut
// plain and writes its output kept (the next block reads it), and its
// gradient writes the shortcut's gradient plain from a kept dOut.
TEST(KeptActivationsTest, AShortcutFromOutsideStaysPlainBesideKeptOutputs) {
  const Dims x = {2, 20, 6, 7};
  const auto obj = CheckLoweringNumerics(Blocks("kept_activations_outside", x, 20, 2, false), 5e-4, 5e-4, 3);
  const ActLayout in = SecondConvInput(x, 20, 20), out = FirstConvOutput({2, 20, 6, 7}, 20);
  if (in == ActLayout::kPlain || in != out) return;  // numerics only: nothing to keep on this CPU
  const std::string listing = obj->Listing();
  EXPECT_NE(listing.find(std::string("the shortcut plain, writing in ") + ActLayoutName(in)), std::string::npos)
      << listing;
  EXPECT_NE(listing.find("the shortcut's written plain"), std::string::npos) << listing;
}

TEST(KeptActivationsTest, KernelsResizeToOtherBatchesAndImageSizes) {
  std::vector<LoweringCase> others;
  for (const Dims& x : std::vector<Dims>{{1, 5, 5, 5}, {4, 5, 9, 6}}) {
    others.push_back(TwoLayers("kept_activations_resize_" + DimsToString(x), x, 20, 17));
  }
  const Dims made = {2, 5, 7, 9};
  if (!StepMatched(*LowerCase(TwoLayers("kept", made, 20, 17)), "kept_activations")) GTEST_SKIP();
  CheckResizedPrograms(TwoLayers("kept_activations_resize", made, 20, 17), others, {"conv", "batch_norm"}, 3e-4,
                       3e-4);
  std::vector<LoweringCase> blocks;
  for (const Dims& x : std::vector<Dims>{{1, 5, 5, 5}, {3, 5, 9, 6}}) {
    blocks.push_back(Blocks("kept_activations_blocks_resize_" + DimsToString(x), x, 20, 2));
  }
  CheckResizedPrograms(Blocks("kept_activations_blocks_resize", made, 20, 2), blocks,
                       {"conv", "batch_norm", "residual", "kept_sum"}, 5e-4, 5e-4);
}

}  // namespace
}  // namespace kiln::test
