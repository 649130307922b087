// Lowering step blocked_batch_norm (compiler/lowering/blocked_batch_norm.h):
// a bias-free conv whose output is batch-normalised (training) keeps that
// output and its gradient in the layout oneDNN's convolution writes, runs
// the batch norm and its gradient in it, and fuses the relu after it.
#include <gtest/gtest.h>

#include <tuple>

#include "compiler/kernels/onednn/batch_norm_kernels.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "tests/lowering_test_util.h"
#include "tests/program_resize_util.h"

namespace kiln::test {
namespace {

// conv2d (no bias) -> y, batch_norm(y) -> z, relu(z) -> r (when `relu`),
// and the backward from dr (or dz): relu_grad, batch_norm_grad,
// conv2d_grad (dx and df). The running statistics are updated in place
// (`is_test`: used instead).
LoweringCase ConvBnChain(const std::string& name, Dims x, Dims f, int64_t stride, int64_t pad, bool relu,
                         bool is_test = false) {
  LoweringCase c = ConvBiasAct(name, false, "", x, f, stride, pad, 1);
  c.ops.push_back(OpBuilder("batch_norm")
                      .In("X", {"conv"})
                      .In("Scale", {"scale"})
                      .In("Bias", {"shift"})
                      .In("Mean", {"mean"})
                      .In("Variance", {"var"})
                      .Out("Y", {"z"})
                      .Out("MeanOut", {"mean"})
                      .Out("VarianceOut", {"var"})
                      .Out("SavedMean", {"saved_mean"})
                      .Out("SavedVariance", {"saved_inv_std"})
                      .Attr("epsilon", 1e-5f)
                      .Attr("momentum", 0.9f)
                      .Attr("is_test", is_test)
                      .Build());
  const std::string out = relu ? "r" : "z", dout = relu ? "dr" : "dz";
  if (relu) {
    c.ops.push_back(OpBuilder("relu").In("X", {"z"}).Out("Out", {"r"}).Build());
    c.ops.push_back(OpBuilder("relu_grad").In("Out", {"r"}).In("Out@GRAD", {"dr"}).Out("X@GRAD", {"dz"}).Build());
  }
  c.ops.push_back(OpBuilder("batch_norm_grad")
                      .In("X", {"conv"})
                      .In("Scale", {"scale"})
                      .In("SavedMean", {"saved_mean"})
                      .In("SavedVariance", {"saved_inv_std"})
                      .In("Y@GRAD", {"dz"})
                      .Out("X@GRAD", {"dconv"})
                      .Out("Scale@GRAD", {"dscale"})
                      .Out("Bias@GRAD", {"dshift"})
                      .Attr("epsilon", 1e-5f)
                      .Attr("is_test", is_test)
                      .Build());
  c.ops.push_back(ConvGradOp("dconv", stride, pad));
  const int64_t oh = (x[2] + 2 * pad - f[2]) / stride + 1, ow = (x[3] + 2 * pad - f[3]) / stride + 1;
  const Dims ch = {f[0]};
  for (const char* v : {"scale", "shift", "mean", "var"}) c.inputs.push_back({v, ch});
  c.inputs.push_back({dout, {x[0], f[0], oh, ow}});
  c.outputs = {out, "mean", "var", "saved_mean", "saved_inv_std", "dx", "df", "dscale", "dshift"};
  return c;
}

// Every argument `from` of `op` renamed `to`.
void Rename(proto::OpDesc* op, const std::string& from, const std::string& to) {
  for (auto* vars : {op->mutable_inputs(), op->mutable_outputs()}) {
    for (auto& var : *vars) {
      for (auto& arg : *var.mutable_args()) {
        if (arg == from) arg = to;
      }
    }
  }
}

// ConvBnChain with a [C_out] bias added after the conv (conv_epilogue's
// conv + bias): elementwise_add(conv, b) -> sum is what the batch norm
// reads, and elementwise_add_grad(dsum) -> dconv, db before conv2d_grad.
LoweringCase BiasConvBnChain(const std::string& name, Dims x, Dims f, bool relu) {
  LoweringCase c = ConvBnChain(name, x, f, 1, 1, relu);
  for (proto::OpDesc& op : c.ops) {
    if (op.type() != "batch_norm" && op.type() != "batch_norm_grad") continue;
    Rename(&op, "conv", "sum");
    Rename(&op, "dconv", "dsum");
  }
  c.ops.insert(c.ops.begin() + 1,
               OpBuilder("elementwise_add").In("X", {"conv"}).In("Y", {"b"}).Out("Out", {"sum"}).Attr("axis", int64_t{1})
                   .Build());
  c.ops.insert(c.ops.end() - 1, BiasAddGradOp());
  c.inputs.insert(c.inputs.begin() + 2, {"b", {f[0]}});
  c.outputs.push_back("db");
  return c;
}

// The chain without relu whose z is a resnet block's residual sum:
// o = relu(z + sc) (z as the add's X, or as its Y when `z_second`), and its
// backward from do: relu_grad, elementwise_add_grad (dz and dsc).
LoweringCase ResidualChain(const std::string& name, Dims x, Dims f, bool z_second) {
  LoweringCase c = ConvBnChain(name, x, f, 1, 1, false);
  const Dims y = {x[0], f[0], x[2], x[3]};
  const std::vector<std::string> ins = z_second ? std::vector<std::string>{"sc", "z"}
                                                : std::vector<std::string>{"z", "sc"};
  const std::vector<proto::OpDesc> ops = {
      OpBuilder("elementwise_add").In("X", {ins[0]}).In("Y", {ins[1]}).Out("Out", {"sum"}).Build(),
      OpBuilder("relu").In("X", {"sum"}).Out("Out", {"o"}).Build(),
      OpBuilder("relu_grad").In("Out", {"o"}).In("Out@GRAD", {"do"}).Out("X@GRAD", {"dsum"}).Build(),
      OpBuilder("elementwise_add_grad")
          .In("Y", {ins[1]})
          .In("Out@GRAD", {"dsum"})
          .Out("X@GRAD", {z_second ? "dsc" : "dz"})
          .Out("Y@GRAD", {z_second ? "dz" : "dsc"})
          .Build()};
  c.ops.insert(c.ops.begin() + 2, ops.begin(), ops.end());
  c.inputs.pop_back();  // dz: computed now
  c.inputs.push_back({"sc", y});
  c.inputs.push_back({"do", y});
  c.outputs.front() = "o";
  c.outputs.push_back("dsc");
  return c;
}

// The layout oneDNN's forward writes for the chain's conv: what the step
// keeps, kPlain when it does not fire.
ActLayout ConvLayout(const Dims& x, const Dims& f, int64_t stride, int64_t pad) {
  jit::FusedConvSpec spec;
  spec.input_dims = x;
  spec.filter_dims = f;
  spec.strides = {stride, stride};
  spec.paddings = {pad, pad};
  spec.dilations = {1, 1};
  return jit::ConvForwardDstLayout(spec, onednn::Settings{});
}

// Numerics against the reference kernels, and that the step fired exactly
// when oneDNN writes a layout it keeps, fusing the relu when there is one.
void CheckChain(const Dims& x, const Dims& f, int64_t stride, int64_t pad, bool relu, unsigned seed) {
  const LoweringCase c = ConvBnChain("blocked_batch_norm_numerics", x, f, stride, pad, relu);
  SCOPED_TRACE("x " + DimsToString(x) + " f " + DimsToString(f) + (relu ? " relu" : ""));
  // Normalising divides by the batch's standard deviation: relative errors
  // of the convolution's sums grow by about |x - mean| / std.
  const auto obj = CheckLoweringNumerics(c, 2e-4, 2e-4, seed);
  const ActLayout layout = ConvLayout(x, f, stride, pad);
  EXPECT_EQ(StepMatched(*obj, "blocked_batch_norm"), layout != ActLayout::kPlain) << obj->lowering;
  if (layout == ActLayout::kPlain) return;
  EXPECT_EQ(obj->lowering.find("relu fused") != std::string::npos, relu) << obj->lowering;
  const std::string listing = obj->Listing();
  // The conv writes y in its own layout; the only reorders of activations
  // left are the batch norm's Y out and dY in, which the dump names.
  const size_t conv = listing.find("conv_0 ("), conv_end = listing.find('\n', conv);
  ASSERT_NE(conv, std::string::npos) << listing;
  EXPECT_EQ(listing.substr(conv, conv_end - conv).find("dst"), std::string::npos) << listing;
  EXPECT_NE(listing.find("batch norm forward"), std::string::npos) << listing;
  EXPECT_NE(listing.find("reorders dst to nchw"), std::string::npos) << listing;
  EXPECT_NE(listing.find("reorders diff_dst from nchw"), std::string::npos) << listing;
}

TEST(BlockedBatchNormTest, ConvBatchNormReluAndTheirGradientsStayBlocked) {
  // 13 channels: a partial block of 16 (or 8); batch 1, odd spatial sizes.
  const Dims x = {2, 3, 9, 7}, f = {13, 3, 3, 3};
  const LoweringCase c = ConvBnChain("blocked_batch_norm", x, f, 1, 1, true);
  // The golden is an AVX-512 CPU's, where oneDNN writes nChw16c.
  if (ConvLayout(x, f, 1, 1) == ActLayout::kNChw16c) CheckLoweringGolden(c);
  CheckChain(x, f, 1, 1, true, 1);
}

// A conv with a bias (conv_epilogue's unit) keeps its output blocked for
// the batch norm as well; its weights pass sums the bias gradient.
TEST(BlockedBatchNormTest, AConvWithABiasKeepsItsOutputBlockedToo) {
  for (bool relu : {true, false}) {
    const Dims x = {2, 3, 9, 7}, f = {13, 3, 3, 3};
    const LoweringCase c = BiasConvBnChain("blocked_batch_norm_bias", x, f, relu);
    SCOPED_TRACE(relu ? "relu" : "no relu");
    if (relu && ConvLayout(x, f, 1, 1) == ActLayout::kNChw16c) CheckLoweringGolden(c);
    const auto obj = CheckLoweringNumerics(c, 2e-4, 2e-4, 5);
    const bool fires = ConvLayout(x, f, 1, 1) != ActLayout::kPlain;
    EXPECT_EQ(StepMatched(*obj, "blocked_batch_norm"), fires) << obj->lowering;
    if (!fires) continue;
    const std::string listing = obj->Listing();
    EXPECT_NE(listing.find("weights and bias"), std::string::npos) << listing;
    EXPECT_EQ(listing.find("elementwise_add_grad"), std::string::npos) << listing;
  }
}

// oneDNN's jit batch norm keeps the fused relu's mask as a bit an element
// of the stored (padded) dims; the mask buffer is that size, so fusing the
// relu costs an eighth of a byte an element kept to the backward.
TEST(BlockedBatchNormTest, TheReluMaskIsABitAnElement) {
  const Dims x = {2, 13, 9, 7};
  EXPECT_EQ(jit::BatchNormReluMaskBytes(ActLayout::kNChw16c, x), 2 * 16 * 9 * 7 / 8);
  EXPECT_EQ(jit::BatchNormReluMaskBytes(ActLayout::kNhwc, {1, 3, 1, 3}), 2);  // 9 bits
  jit::BatchNormSpec spec;
  spec.x_dims = x;
  spec.layout = ConvLayout({2, 3, 9, 7}, {13, 3, 3, 3}, 1, 1);
  if (spec.layout == ActLayout::kPlain) GTEST_SKIP() << "oneDNN keeps no blocked layout on this CPU";
  EXPECT_FALSE(jit::BatchNormReluFits(spec, onednn::Settings{}));  // no relu asked for
  spec.fuse_relu = true;
  EXPECT_TRUE(jit::BatchNormReluFits(spec, onednn::Settings{}));
}

TEST(BlockedBatchNormTest, OddChannelsBatchOneAndStrides) {
  CheckChain({1, 3, 7, 5}, {13, 3, 3, 3}, 1, 1, true, 2);
  CheckChain({1, 5, 9, 11}, {17, 5, 3, 3}, 2, 1, true, 3);
  CheckChain({3, 4, 5, 5}, {3, 4, 1, 1}, 1, 0, true, 4);
  CheckChain({2, 16, 6, 6}, {32, 16, 3, 3}, 1, 1, true, 5);
  // Without a relu: Y itself leaves the chain.
  CheckChain({1, 3, 7, 5}, {13, 3, 3, 3}, 1, 1, false, 6);
}

TEST(BlockedBatchNormTest, ResidualSumReluAndItsGradientReadAndWriteTheKeptLayout) {
  const Dims x = {2, 3, 7, 5}, f = {13, 3, 3, 3};
  const LoweringCase c = ResidualChain("blocked_batch_norm_residual", x, f, false);
  const ActLayout layout = ConvLayout(x, f, 1, 1);
  if (layout == ActLayout::kNChw16c) CheckLoweringGolden(c);
  for (const auto& [name, xd, fd, second] : std::vector<std::tuple<const char*, Dims, Dims, bool>>{
           {"a", x, f, false}, {"b", {1, 4, 5, 9}, {17, 4, 3, 3}, true}, {"c", {3, 2, 6, 6}, {3, 2, 3, 3}, false}}) {
    SCOPED_TRACE(name);
    const auto obj = CheckLoweringNumerics(ResidualChain(name, xd, fd, second), 2e-4, 2e-4, 11);
    const bool fires = ConvLayout(xd, fd, 1, 1) != ActLayout::kPlain;
    EXPECT_EQ(StepMatched(*obj, "blocked_batch_norm"), fires) << obj->lowering;
    EXPECT_EQ(obj->lowering.find("residual sum + relu reading z kept") != std::string::npos, fires) << obj->lowering;
    // z and dz stay kept: the batch norm kernels reorder nothing (the
    // convolution's backward-data primitive may still reorder its diff_dst
    // into the layout it runs fastest in).
    if (fires) {
      EXPECT_EQ(obj->Listing().find("nchw"), std::string::npos) << obj->Listing();
    }
  }
  // The sum's output leaves through z too: no residual unit, z reordered.
  LoweringCase leaves = ResidualChain("blocked_batch_norm_residual_z_leaves", x, f, false);
  leaves.outputs.push_back("z");
  const auto obj = CheckLoweringNumerics(leaves, 2e-4, 2e-4, 12);
  EXPECT_EQ(obj->lowering.find("residual sum"), std::string::npos) << obj->lowering;
}

TEST(BlockedBatchNormTest, KeepsTheReluWhenItsInputLeaves) {
  LoweringCase c = ConvBnChain("blocked_batch_norm_relu_not_fused", {2, 3, 6, 5}, {13, 3, 3, 3}, 1, 1, true);
  c.outputs.push_back("z");
  if (ConvLayout({2, 3, 6, 5}, {13, 3, 3, 3}, 1, 1) == ActLayout::kNChw16c) CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c, 2e-4, 2e-4, 8);
  if (ConvLayout({2, 3, 6, 5}, {13, 3, 3, 3}, 1, 1) == ActLayout::kPlain) return;
  EXPECT_TRUE(StepMatched(*obj, "blocked_batch_norm")) << obj->lowering;
  EXPECT_EQ(obj->lowering.find("relu fused"), std::string::npos) << obj->lowering;
}

TEST(BlockedBatchNormTest, DoesNotFireWhenTheConvOutputLeavesOrHasAnotherReader) {
  // y leaves the cluster mid-chain.
  LoweringCase leaves = ConvBnChain("blocked_batch_norm_not_fired", {2, 3, 6, 5}, {13, 3, 3, 3}, 1, 1, true);
  leaves.outputs.push_back("conv");
  CheckLoweringGolden(leaves);
  const auto obj = CheckLoweringNumerics(leaves, 2e-4, 2e-4);
  EXPECT_FALSE(StepMatched(*obj, "blocked_batch_norm")) << obj->lowering;
  // A consumer that needs y plain (a framework op reading it).
  LoweringCase plain = ConvBnChain("blocked_batch_norm_plain_reader", {2, 3, 6, 5}, {13, 3, 3, 3}, 1, 1, true);
  plain.ops.insert(plain.ops.begin() + 1,
                   OpBuilder("reduce_sum").In("X", {"conv"}).Out("Out", {"total"}).Attr("reduce_all", true).Build());
  plain.outputs.push_back("total");
  const auto obj2 = CheckLoweringNumerics(plain, 2e-4, 2e-4);
  EXPECT_FALSE(StepMatched(*obj2, "blocked_batch_norm")) << obj2->lowering;
  // Inference-mode statistics: not this step's (the anchors run it).
  const LoweringCase test_mode =
      ConvBnChain("blocked_batch_norm_is_test", {2, 3, 6, 5}, {13, 3, 3, 3}, 1, 1, true, /*is_test=*/true);
  const auto obj3 = LowerCase(test_mode);
  EXPECT_FALSE(StepMatched(*obj3, "blocked_batch_norm")) << obj3->lowering;
}

// Dynamic shapes: the chains' kernels (convolutions, batch norms, the
// residual sum) compiled for one batch and image size, resized to others.
TEST(BlockedBatchNormTest, KernelsResizeToOtherBatchesAndImageSizes) {
  const Dims f = {6, 3, 3, 3};
  std::vector<LoweringCase> bn, residual;
  for (const Dims& x : std::vector<Dims>{{1, 3, 5, 5}, {4, 3, 7, 9}}) {
    bn.push_back(ConvBnChain("bn_resize_" + DimsToString(x), x, f, 1, 1, true));
    residual.push_back(ResidualChain("residual_resize_" + DimsToString(x), x, f, false));
  }
  CheckResizedPrograms(ConvBnChain("bn_resize", {2, 3, 6, 6}, f, 1, 1, true), bn, {"conv", "batch_norm"}, 2e-4, 2e-4);
  CheckResizedPrograms(ResidualChain("residual_resize", {2, 3, 6, 6}, f, false), residual,
                       {"conv", "batch_norm", "residual"}, 2e-4, 2e-4);
}

}  // namespace
}  // namespace kiln::test
