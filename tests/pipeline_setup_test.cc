// tools/pipeline_setup: flags -> pipeline options at the tool edge.
#include "tools/pipeline_setup.h"

#include <cstdlib>
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
  EXPECT_TRUE(o.dump_dir.empty());
  EXPECT_TRUE(static_cast<bool>(o.config.jit_sink));

  FLAGS_recompute = false;
  FLAGS_recompute_ops = "softmax, matmul";
  FLAGS_use_jit = true;
  FLAGS_jit_min_cluster_size = 4;
  FLAGS_use_inplace = false;
  FLAGS_dump_passes = "some/dir";
  o = PipelineOptionsFromFlags({});
  EXPECT_FALSE(o.recompute);
  EXPECT_TRUE(o.build_jit);
  EXPECT_FALSE(o.inplace);
  EXPECT_EQ(o.config.recompute.op_types, (std::set<std::string>{"matmul", "softmax"}));
  EXPECT_EQ(o.config.build_jit.min_cluster_size, 4);
  EXPECT_EQ(o.dump_dir, "some/dir");
}

TEST(PipelineSetup, CheckDumpPassesFlagNamesTheFlag) {
  gflags::FlagSaver saver;
  const std::string dir = ::testing::TempDir() + "/kiln_pipeline_setup";
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir + " && touch " + dir + "/file").c_str()), 0);
  FLAGS_dump_passes = "";
  EXPECT_NO_THROW(CheckDumpPassesFlag());
  FLAGS_dump_passes = dir + "/file";
  try {
    CheckDumpPassesFlag();
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--dump_passes: pass dump directory '" + dir + "/file': exists and is not a directory");
  }
  FLAGS_dump_passes = dir + "/new";
  EXPECT_NO_THROW(CheckDumpPassesFlag());
}

}  // namespace
}  // namespace kiln::tools
