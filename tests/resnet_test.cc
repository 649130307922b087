// BuildResnet (framework/models/resnet.cc) on synthetic images: its shape and
// parameter count, the JIT on against off, the loss falling, and bad
// configurations.
#include <gtest/gtest.h>

#include "framework/data/synthetic_tasks.h"
#include "framework/op_desc.h"
#include "tests/builtin_model_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

class ResnetTest : public ::testing::Test {
 protected:
  static ResnetConfig Tiny() {
    ResnetConfig c;
    c.height = c.width = 8;
    c.widths = {4, 8};
    c.blocks = 1;
    return c;
  }
  static int64_t Params(const Model& m) {
    int64_t n = 0;
    for (const std::string& p : m.params) n += Numel(VarDims(*FindVarDesc(m.train.blocks(0), p)));
    return n;
  }
};

// The ResNet-18 shape: 3x3 convs 3->32 (stem), per stage
// 2 blocks of two 3x3 convs, 1x1 shortcuts into stages 2-4, batch_norm
// scale and bias per conv, fc 256 -> 10. The PyTorch twin
// (tools/bench/torch_peer.py) has the same count.
TEST_F(ResnetTest, DefaultIsResnet18ShapedWithItsParameterCount) {
  const Model m = BuildResnet(ResnetConfig{}, test::AdamAt001());
  EXPECT_EQ(m.sample_dims, (Dims{3, 32, 32}));
  int64_t expect = 3 * 32 * 9 + 2 * 32;  // stem
  int64_t in = 32;
  for (int64_t w : {32, 64, 128, 256}) {
    for (int k = 0; k < 2; ++k) {
      expect += in * w * 9 + w * w * 9 + 4 * w;
      if (in != w) expect += in * w + 2 * w;
      in = w;
    }
  }
  expect += 256 * 10 + 10;
  EXPECT_EQ(Params(m), expect);
  EXPECT_EQ(expect, 2797610);
  // Convolutions have no bias; the forward program uses the running statistics.
  for (const auto& op : m.forward.blocks(0).ops()) {
    if (op.type() == "conv2d") {
      EXPECT_EQ(op.inputs_size(), 2);
    }
    if (op.type() == "batch_norm") {
      EXPECT_TRUE(FindAttr(op, "is_test")->b());
    }
  }
}

TEST_F(ResnetTest, JitOnMatchesJitOffAndTheLossFalls) {
  const Dataset all = MakeSyntheticImages(320, 3, 8, 8, 10, /*seed=*/3);
  auto [train, test] = SplitDataset(all, 0.8);
  const Model m = BuildResnet(Tiny(), test::AdamAt001());
  const test::OffAndOn r = test::ExpectJitMatchesJitOff(m, train, test, /*batch=*/16, /*steps=*/20);
  // Mean of the last 10 losses against the first 10.
  EXPECT_LT(r.off.final_loss, 0.9f * r.off.first_loss);
  EXPECT_NEAR(r.on.test_accuracy, r.off.test_accuracy, 1e-6);
}

// Widths of 16 and more channels (20: a partial block of 16), where the
// JIT keeps the activations between the blocks in oneDNN's layout
// (kept_activations), through a downsampling shortcut.
TEST_F(ResnetTest, JitOnMatchesJitOffWithActivationsKept) {
  const Dataset all = MakeSyntheticImages(96, 3, 8, 8, 10, /*seed=*/5);
  auto [train, test] = SplitDataset(all, 0.8);
  ResnetConfig c = Tiny();
  c.widths = {16, 20};
  c.blocks = 2;
  const Model m = BuildResnet(c, test::AdamAt001());
  const test::OffAndOn r = test::ExpectJitMatchesJitOff(m, train, test, /*batch=*/8, /*steps=*/6);
  EXPECT_NEAR(r.on.test_accuracy, r.off.test_accuracy, 1e-6);
}

TEST_F(ResnetTest, BadConfigurationsNameTheirFlag) {
  auto message = [](const ResnetConfig& c) { return test::ErrorOf([&] { BuildResnet(c, TrainConfig{}); }); };
  ResnetConfig c = Tiny();
  c.widths = {};
  EXPECT_NE(message(c).find("widths (--resnet_widths) is empty"), std::string::npos) << message(c);
  c.widths = {4, 0};
  EXPECT_NE(message(c).find("widths (--resnet_widths) [4,0]: 0 is not a positive channel count"),
            std::string::npos)
      << message(c);
  c = Tiny();
  c.blocks = 0;
  EXPECT_NE(message(c).find("blocks (--resnet_blocks) must be at least 1, got 0"), std::string::npos) << message(c);
}

}  // namespace
}  // namespace kiln
