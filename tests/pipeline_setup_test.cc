// tools/pipeline_setup: flags -> pipeline options at the tool edge.
#include "tools/pipeline_setup.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/flags.h"

namespace kiln::tools {
namespace {

TEST(PipelineSetup, SplitOpList) {
  EXPECT_EQ(SplitOpList(""), std::vector<std::string>{});
  EXPECT_EQ(SplitOpList("relu"), std::vector<std::string>{"relu"});
  EXPECT_EQ(SplitOpList(" relu , exp,,tanh ,"), (std::vector<std::string>{"relu", "exp", "tanh"}));
  EXPECT_EQ(SplitOpList(" , "), std::vector<std::string>{});
}

TEST(PipelineSetup, BuildJitPassOptionsFromFlags) {
  gflags::FlagSaver saver;
  FLAGS_jit_allow_ops = "relu,exp";
  FLAGS_jit_deny_ops = "sgd";
  FLAGS_jit_min_cluster_size = 3;
  const BuildJitPassOptions o = BuildJitPassOptionsFromFlags();
  EXPECT_EQ(o.allow_ops, (std::vector<std::string>{"relu", "exp"}));
  EXPECT_EQ(o.deny_ops, (std::vector<std::string>{"sgd"}));
  EXPECT_EQ(o.min_cluster_size, 3);
  EXPECT_TRUE(o.keep_vars.empty());
}

TEST(PipelineSetup, PipelineOptionsFromFlags) {
  gflags::FlagSaver saver;
  PipelineOptions o = PipelineOptionsFromFlags({"x", "loss"});
  // The defaults: recompute (layer_norm) and in-place on, the JIT off.
  EXPECT_TRUE(o.recompute);
  EXPECT_FALSE(o.build_jit);
  EXPECT_TRUE(o.inplace);
  EXPECT_EQ(o.config.recompute.op_types, std::set<std::string>{"layer_norm"});
  EXPECT_EQ(o.keep_vars, (std::set<std::string>{"x", "loss"}));
  EXPECT_TRUE(static_cast<bool>(o.config.jit_sink));

  FLAGS_recompute = false;
  FLAGS_recompute_ops = "softmax, matmul";
  FLAGS_use_jit = true;
  FLAGS_jit_min_cluster_size = 4;
  FLAGS_use_inplace = false;
  o = PipelineOptionsFromFlags({});
  EXPECT_FALSE(o.recompute);
  EXPECT_TRUE(o.build_jit);
  EXPECT_FALSE(o.inplace);
  EXPECT_EQ(o.config.recompute.op_types, (std::set<std::string>{"matmul", "softmax"}));
  EXPECT_EQ(o.config.build_jit.min_cluster_size, 4);
}

}  // namespace
}  // namespace kiln::tools
