// BuildGpt (framework/models/gpt.cc) on synthetic token sequences: its shape
// and parameter count, the JIT on against off (the causal attention fused),
// the loss falling, and bad configurations.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "framework/data/synthetic_tasks.h"
#include "framework/op_desc.h"
#include "tests/builtin_model_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

class GptTest : public ::testing::Test {
 protected:
  static GptConfig Tiny() { return test::TinyGpt(); }
  static TrainConfig Adam() { return test::AdamAt001(); }
};

// The GPT: 4 layers, d 256, 4 heads, seq 128, vocab 256, MLP 1024.
// The PyTorch twin (tools/bench/torch_peer.py) has the same count.
TEST_F(GptTest, ParameterCountAndShapes) {
  GptConfig c;
  const Model m = BuildGpt(c, Adam());
  const int64_t d = 256, f = 1024, v = 256, t = 128;
  const int64_t block = 4 * d + 4 * (d * d + d) + (d * f + f) + (f * d + d);
  const int64_t expect = v * d + t * d + 4 * block + 2 * d + d * v + v;
  int64_t n = 0;
  for (const std::string& p : m.params) n += Numel(VarDims(*FindVarDesc(m.train.blocks(0), p)));
  EXPECT_EQ(n, expect);
  EXPECT_EQ(expect, 3323648);
  EXPECT_EQ(m.sample_dims, (Dims{t + 1}));
  EXPECT_EQ(m.token_vocab, v);
  EXPECT_EQ(VarDims(*FindVarDesc(m.forward.blocks(0), m.probs)), (Dims{-1, v}));
}

TEST_F(GptTest, JitOnMatchesJitOffAndTheLossFalls) {
  const GptConfig c = Tiny();
  const Dataset all = MakeSyntheticTokens(320, c.seq_len + 1, c.vocab, /*seed=*/3);
  auto [train, test] = SplitDataset(all, 0.8);
  const Model m = BuildGpt(c, Adam());
  const test::OffAndOn r = test::ExpectJitMatchesJitOff(m, train, test, /*batch=*/16, /*steps=*/20);
  // Uniform over 16 tokens is ln 16 = 2.77; the successor rule leaves about 1.0.
  EXPECT_LT(r.off.final_loss, 0.8f * r.off.first_loss);
  EXPECT_NEAR(r.on.test_accuracy, r.off.test_accuracy, 1e-6);
}

TEST_F(GptTest, SyntheticTokensFollowTheirSuccessorRule) {
  const Dataset d = MakeSyntheticTokens(200, 33, 16, 7);
  ASSERT_EQ(d.features.dims(), (Dims{200, 33}));
  const float* x = d.features.data<float>();
  // The most frequent successor of each token is its table entry: about 3/4
  // of the transitions follow one table.
  std::vector<std::vector<int>> counts(16, std::vector<int>(16, 0));
  for (int64_t i = 0; i < 200; ++i) {
    for (int64_t j = 1; j < 33; ++j) ++counts[int(x[i * 33 + j - 1])][int(x[i * 33 + j])];
    EXPECT_EQ(d.labels.data<int64_t>()[i], int64_t(x[i * 33 + 32]));
  }
  int followed = 0;
  for (const auto& row : counts) followed += *std::max_element(row.begin(), row.end());
  EXPECT_GT(followed, 0.7 * 200 * 32);
  EXPECT_LT(followed, 0.85 * 200 * 32);
}

TEST_F(GptTest, BadConfigurationsNameTheirFlag) {
  auto message = [](const GptConfig& c) { return test::ErrorOf([&] { BuildGpt(c, TrainConfig{}); }); };
  GptConfig c = Tiny();
  c.num_heads = 3;
  EXPECT_NE(message(c).find("num_heads (--num_heads) 3 does not divide d_model (--d_model) 16"), std::string::npos)
      << message(c);
  c = Tiny();
  c.layers = 0;
  EXPECT_NE(message(c).find("layers (--gpt_layers) must be at least 1, got 0"), std::string::npos) << message(c);
  c = Tiny();
  c.vocab = 1;
  EXPECT_NE(message(c).find("vocab (--vocab) must be at least 2, got 1"), std::string::npos) << message(c);
}

}  // namespace
}  // namespace kiln
