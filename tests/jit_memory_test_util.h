// Shared by build_jit_pass_memory_test and jit_launch_memory_test: a fixture
// that gives each test a JIT of its own (test::TestJit), and the small
// transformer whose clusters have shape-only and donatable vars.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "framework/models/models.h"
#include "tests/test_jit.h"

namespace kiln::test {

class JitMemoryTest : public ::testing::Test {
 protected:
  TestJit jit_;
};

// One encoder block (seq 5, d_model 8, 2 heads) trained with sgd, and its
// train program through build_jit_pass keeping features, labels and loss,
// with softmax_with_cross_entropy denied, clustered into `jit`'s cache.
struct TinyTransformer {
  TransformerConfig config;
  Model model;
  std::set<std::string> keep;
  BuildJitPassOptions options;
  BuildJitReport report;
  proto::ProgramDesc jitted;

  explicit TinyTransformer(TestJit& jit) {
    config.seq_len = 5;
    config.d_model = 8;
    config.num_heads = 2;
    config.ffn_dim = 12;
    config.classes = 3;
    TrainConfig train;
    train.lr = 0.1f;
    model = BuildTransformer(config, train);
    keep = {model.features, model.labels, model.loss};
    options.keep_vars = keep;
    // The loss stays outside: the forward and backward clusters then pass
    // activations between them (shape-only and donatable vars).
    options.deny_ops = {"softmax_with_cross_entropy"};
    jitted = jit.ApplyBuildJit(model.train, options, &report);
  }
};

}  // namespace kiln::test
