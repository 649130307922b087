#include "passes/build_jit_pass.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/jit_subgraph.h"
#include "framework/models/models.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/validate.h"
#include "passes/pass_registry.h"
#include "tests/golden_util.h"
#include "tests/program_maker.h"
#include "tests/build_jit_pass_test_util.h"

namespace kiln {
namespace {

using namespace build_jit_pass_test;  // the helpers shared by the split files (tests/build_jit_pass_test_util.h)

// ---- Golden tests --------------------------------------------------------------------

TEST(BuildJitPassGolden, MlpTrainSgd) {
  const Model m = SmallMlp(OptimizerKind::kSgd);
  auto r = CheckGolden("mlp_train_sgd", m.train, MlpOptions(m));
  EXPECT_TRUE(r->changed);
  // The whole step is one cluster: forward, the loss (its ops run their
  // framework kernels inside), backward and the sgd updates.
  ASSERT_EQ(r->report.clusters.size(), 1u);
  EXPECT_EQ(Types(r->after), (std::vector<std::string>{"jit_launch"}));
  EXPECT_TRUE(r->report.excluded.empty());
  const JitSubgraph& bwd = r->sink.subgraphs[0];
  // Every parameter is updated in place inside the cluster: it is both an
  // input and an output of the launch op.
  for (const std::string& param : m.params) {
    EXPECT_NE(std::find(bwd.inputs.begin(), bwd.inputs.end(), param), bwd.inputs.end()) << param;
    EXPECT_NE(std::find(bwd.outputs.begin(), bwd.outputs.end(), param), bwd.outputs.end()) << param;
  }
}

TEST(BuildJitPassGolden, MlpTrainAdam) {
  const Model m = SmallMlp(OptimizerKind::kAdam);
  auto r = CheckGolden("mlp_train_adam", m.train, MlpOptions(m));
  EXPECT_TRUE(r->changed);
  ASSERT_EQ(r->report.clusters.size(), 1u);
  // Moments and beta powers are persistable and updated in place too.
  const JitSubgraph& bwd = r->sink.subgraphs[0];
  for (const std::string& param : m.params) {
    for (const char* suffix : {"", ".moment1", ".moment2", ".beta1_pow", ".beta2_pow"}) {
      EXPECT_NE(std::find(bwd.outputs.begin(), bwd.outputs.end(), param + suffix), bwd.outputs.end())
          << param << suffix;
    }
  }
}

TEST(BuildJitPassGolden, DiamondDoesNotSwallowNonCandidatePath) {
  BuildJitPassOptions o;
  o.deny_ops = kStandIns;
  o.keep_vars = {"x", "label", "d"};
  auto r = CheckGolden("diamond_cycle", DiamondProgram(), o);
  EXPECT_TRUE(r->changed);
  ASSERT_EQ(r->report.clusters.size(), 1u);
  EXPECT_EQ(r->report.clusters[0].ops, (std::vector<std::string>{"op #0 'relu'", "op #2 'exp'"}));
  EXPECT_EQ(r->report.clusters[0].outputs, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(Types(r->after), (std::vector<std::string>{"jit_launch", "softmax_with_cross_entropy", "elementwise_add"}));
  const auto* add = r->report.FindExcluded("op #3 'elementwise_add'");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->reason, JitExclusion::kCycle);
  EXPECT_STREQ(JitExclusionName(add->reason), "cycle");
  EXPECT_NE(add->detail.find("through op #1 'softmax_with_cross_entropy'"), std::string::npos) << add->detail;
}

TEST(BuildJitPassGolden, WriteAfterReadOrderCountsAsPath) {
  BuildJitPassOptions o;
  o.deny_ops = kStandIns;
  o.keep_vars = {"c"};
  auto r = CheckGolden("war_cycle", WarCycleProgram(), o);
  EXPECT_TRUE(r->changed);
  ASSERT_EQ(r->report.clusters.size(), 1u);
  EXPECT_EQ(r->report.clusters[0].ops, (std::vector<std::string>{"op #2 'exp'", "op #3 'elementwise_add'"}));
  const auto* relu = r->report.FindExcluded("op #0 'relu'");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->reason, JitExclusion::kCycle);
  EXPECT_NE(relu->detail.find("through op #1 'fill_constant'"), std::string::npos) << relu->detail;
}

TEST(BuildJitPassGolden, AllowList) {
  BuildJitPassOptions o;
  o.allow_ops = {"relu", "exp"};
  o.keep_vars = {"d"};
  auto r = CheckGolden("allow_list", ChainProgram(), o);
  ASSERT_EQ(r->report.clusters.size(), 1u);
  EXPECT_EQ(r->report.clusters[0].ops, (std::vector<std::string>{"op #0 'relu'", "op #1 'exp'"}));
  for (const char* op : {"op #2 'tanh'", "op #3 'elementwise_add'"}) {
    const auto* e = r->report.FindExcluded(op);
    ASSERT_NE(e, nullptr) << op;
    EXPECT_EQ(e->reason, JitExclusion::kNotAllowed);
    EXPECT_STREQ(JitExclusionName(e->reason), "not_allowed");
  }
}

TEST(BuildJitPassGolden, DenyList) {
  BuildJitPassOptions o;
  o.deny_ops = {"exp"};
  o.keep_vars = {"d"};
  auto r = CheckGolden("deny_list", ChainProgram(), o);
  ASSERT_EQ(r->report.clusters.size(), 1u);
  EXPECT_EQ(r->report.clusters[0].ops, (std::vector<std::string>{"op #2 'tanh'", "op #3 'elementwise_add'"}));
  const auto* exp = r->report.FindExcluded("op #1 'exp'");
  ASSERT_NE(exp, nullptr);
  EXPECT_EQ(exp->reason, JitExclusion::kDenied);
  EXPECT_STREQ(JitExclusionName(exp->reason), "denied");
  const auto* relu = r->report.FindExcluded("op #0 'relu'");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->reason, JitExclusion::kClusterTooSmall);
}

TEST(BuildJitPassGolden, WholeChainIsOneCluster) {
  BuildJitPassOptions o;
  o.keep_vars = {"d"};
  auto r = CheckGolden("chain", ChainProgram(), o);
  ASSERT_EQ(r->report.clusters.size(), 1u);
  EXPECT_EQ(r->report.clusters[0].ops.size(), 4u);
  EXPECT_EQ(r->report.clusters[0].inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(r->report.clusters[0].outputs, (std::vector<std::string>{"d"}));
  EXPECT_TRUE(r->report.excluded.empty());
}

TEST(BuildJitPassGolden, MinClusterSizeDoesNotFire) {
  BuildJitPassOptions o;
  o.min_cluster_size = 5;
  o.keep_vars = {"d"};
  auto r = CheckGolden("min_cluster_size", ChainProgram(), o);
  EXPECT_FALSE(r->changed);
  EXPECT_TRUE(r->sink.subgraphs.empty());
  ASSERT_EQ(r->report.excluded.size(), 4u);
  for (const auto& e : r->report.excluded) {
    EXPECT_EQ(e.reason, JitExclusion::kClusterTooSmall);
    EXPECT_EQ(e.detail, "its cluster has 4 ops, fewer than min_cluster_size 5");
  }
}

TEST(BuildJitPassGolden, LoneCandidateDoesNotFire) {
  BuildJitPassOptions o;
  o.deny_ops = kStandIns;
  o.keep_vars = {"x", "label", "loss"};
  auto r = CheckGolden("lone_candidate", LoneCandidateProgram(), o);
  EXPECT_FALSE(r->changed);
  EXPECT_TRUE(r->sink.subgraphs.empty());
  const auto* relu = r->report.FindExcluded("op #0 'relu'");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->reason, JitExclusion::kClusterTooSmall);
  EXPECT_STREQ(JitExclusionName(relu->reason), "too_small");
}

// Ops no data edge joins merge by type (the optimizer updates after a
// gradient average): one cluster of the two relus.
TEST(BuildJitPassGolden, LoneOpsOfATypeMerge) {
  BuildJitPassOptions o;
  o.deny_ops = kStandIns;
  o.keep_vars = {"ua", "ub", "loss"};
  auto r = CheckGolden("lone_ops_merge", LoneOpsProgram(), o);
  ASSERT_EQ(r->report.clusters.size(), 1u);
  EXPECT_EQ(r->report.clusters[0].ops, (std::vector<std::string>{"op #0 'relu'", "op #2 'relu'"}));
}

TEST(BuildJitPassGolden, LoneOpsOnAPathOrOfOtherTypesDoNotMerge) {
  BuildJitPassOptions o;
  o.deny_ops = kStandIns;
  o.keep_vars = {"ul", "eb", "loss"};
  auto r = CheckGolden("lone_ops_apart", LoneOpsApartProgram(), o);
  EXPECT_FALSE(r->changed);
  EXPECT_TRUE(r->sink.subgraphs.empty());
  for (const char* label : {"op #0 'relu'", "op #2 'relu'", "op #3 'exp'"}) {
    const auto* e = r->report.FindExcluded(label);
    ASSERT_NE(e, nullptr) << label;
    EXPECT_EQ(e->reason, JitExclusion::kClusterTooSmall) << label;
  }
}

TEST(BuildJitPassGolden, NoCandidatesDoesNotFire) {
  BuildJitPassOptions o;
  o.deny_ops = kStandIns;
  auto r = CheckGolden("no_candidates", NoCandidateProgram(), o);
  EXPECT_FALSE(r->changed);
  ASSERT_EQ(r->report.excluded.size(), 2u);
  for (const auto& e : r->report.excluded) {
    EXPECT_EQ(e.reason, JitExclusion::kDenied);
    EXPECT_STREQ(JitExclusionName(e.reason), "denied");
  }
  // Unchanged: the block comes back as it went in.
  const proto::ProgramDesc program = NoCandidateProgram();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(program.blocks(0), r->after));
}

TEST(BuildJitPassGolden, FetchedReadOutsideAndPersistableOutputs) {
  BuildJitPassOptions o;
  o.deny_ops = kStandIns;
  o.keep_vars = {"x", "label", "s", "loss"};
  auto r = CheckGolden("fetch_persistable", FetchPersistableProgram(), o);
  EXPECT_TRUE(r->changed);
  ASSERT_EQ(r->sink.subgraphs.size(), 1u);
  const JitSubgraph& sg = r->sink.subgraphs[0];
  EXPECT_EQ(sg.inputs, (std::vector<std::string>{"x", "w", "lr"}));
  EXPECT_EQ(sg.outputs, (std::vector<std::string>{"h", "s", "w"}));
  EXPECT_EQ(Types(sg.block), (std::vector<std::string>{"matmul", "relu", "scale", "exp", "matmul", "sgd"}));
  std::vector<std::string> sub_vars;
  for (const auto& v : sg.block.vars()) sub_vars.push_back(v.name());
  EXPECT_EQ(sub_vars, (std::vector<std::string>{"x", "w", "h", "a", "s", "d", "g", "lr"}));
  EXPECT_TRUE(FindVarDesc(sg.block, "w")->persistable());
  // Dead and internal vars left the main block; the others stay declared.
  for (const char* gone : {"a", "d", "g"}) EXPECT_EQ(FindVarDesc(r->after, gone), nullptr) << gone;
  for (const char* kept : {"x", "w", "lr", "h", "s", "sm", "loss"}) EXPECT_NE(FindVarDesc(r->after, kept), nullptr);
  const proto::OpDesc& launch = r->after.ops(0);
  EXPECT_EQ(launch.type(), "jit_launch");
  EXPECT_EQ(InputArgs(launch, "X"), sg.inputs);
  EXPECT_EQ(OutputArgs(launch, "Out"), sg.outputs);
  ASSERT_NE(FindAttr(launch, "compilation_key"), nullptr);
  EXPECT_EQ(FindAttr(launch, "compilation_key")->type(), proto::AttrDesc::STRING);
  EXPECT_EQ(FindAttr(launch, "compilation_key")->s(), JitSubgraphFingerprint(sg));
}

}  // namespace
}  // namespace kiln
