// The resnet and gpt tests' shared check: a built-in model trained with the
// JIT off and with kiln train's default JIT pipeline (attention fusion,
// layer_norm recompute, build_jit, in-place) gives the same losses.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "framework/models/models.h"
#include "framework/trainer.h"
#include "tests/test_jit.h"

namespace kiln::test {

// A GPT small enough for a test: 2 layers, seq 8, d 16, 2 heads, vocab 16.
inline GptConfig TinyGpt() {
  GptConfig c;
  c.layers = 2;
  c.seq_len = 8;
  c.d_model = 16;
  c.num_heads = 2;
  c.ffn_dim = 32;
  c.vocab = 16;
  return c;
}

// Adam at lr 0.01, as the GPT and ResNet tests train.
inline TrainConfig AdamAt001() {
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kAdam;
  tc.lr = 0.01f;
  return tc;
}

// kiln train's default pipeline, storing its subgraphs in `jit`.
inline PipelineOptions KilnTrainPipeline(TestJit& jit, const std::set<std::string>& keep) {
  PipelineOptions o = jit.Pipeline(BuildJitPassOptions{});
  o.fuse_attention = true;
  o.recompute = true;
  o.config.recompute.op_types = {"layer_norm"};
  o.inplace = true;
  o.keep_vars = keep;
  return o;
}

struct OffAndOn {
  TrainResult off;
  TrainResult on;
};

// `steps` steps of batch `batch` each way; fails the test where a loss differs
// by more than 1e-4 relative (the tolerance of tests/jit_train_test.cc).
// The JIT side runs on a JIT of its own (tests/test_jit.h).
inline OffAndOn ExpectJitMatchesJitOff(const Model& m, const Dataset& train, const Dataset& test, int64_t batch,
                                       int64_t steps, float rtol = 1e-4f) {
  TestJit jit;
  TrainOptions o;
  o.epochs = 1000;
  o.batch_size = batch;
  o.max_steps = steps;
  OffAndOn r;
  r.off = Train(m, train, test, o);
  o.registry = &jit.registry();
  o.program_transform = [&jit](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    return RunPipeline(p, KilnTrainPipeline(jit, keep), jit.registry());
  };
  r.on = Train(m, train, test, o);
  EXPECT_GT(jit->stats().compiles, 0);
  EXPECT_EQ(r.off.losses.size(), static_cast<size_t>(steps));
  EXPECT_EQ(r.on.losses.size(), r.off.losses.size());
  for (size_t i = 0; i < std::min(r.off.losses.size(), r.on.losses.size()); ++i) {
    EXPECT_NEAR(r.on.losses[i], r.off.losses[i], rtol * std::max(1.0f, std::fabs(r.off.losses[i]))) << "step " << i;
  }
  return r;
}

}  // namespace kiln::test
