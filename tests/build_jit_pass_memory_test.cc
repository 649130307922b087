// build_jit_pass's memory attributes of a cluster: which inputs are read only
// for their shape (jit_launch's shape_only_inputs), which outputs only shape
// readers follow, and which inputs die in the cluster (donatable: not fed,
// fetched, persistable or read as data after it), on a small transformer and
// on a hand-built program. (What launches do with them: jit_launch_memory_test.)
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "framework/op_desc.h"
#include "passes/pipeline.h"
#include "tests/jit_memory_test_util.h"
#include "tests/memory_test_util.h"

namespace kiln {
namespace {

using test::Contains;
using JitPassMemoryTest = test::JitMemoryTest;

std::vector<std::string> OpTypes(const JitSubgraph& sg) {
  std::vector<std::string> types;
  for (const auto& op : sg.block.ops()) types.push_back(op.type());
  return types;
}

const proto::OpDesc* FindLaunch(const proto::ProgramDesc& p, const std::string& key) {
  for (const auto& op : p.blocks(0).ops()) {
    if (op.type() != "jit_launch") continue;
    for (const auto& a : op.attrs()) {
      if (a.name() == "compilation_key" && a.s() == key) return &op;
    }
  }
  return nullptr;
}

std::vector<std::string> StringsAttr(const proto::OpDesc& op, const std::string& name) {
  for (const auto& a : op.attrs()) {
    if (a.name() == name) return {a.strings().begin(), a.strings().end()};
  }
  return {};
}

TEST_F(JitPassMemoryTest, TransformerClustersHaveShapeOnlyAndDonatableVars) {
  const test::TinyTransformer tt(jit_);
  const Model& m = tt.model;
  const std::set<std::string>& keep = tt.keep;
  const BuildJitReport& report = tt.report;
  const proto::ProgramDesc& p = tt.jitted;
  ASSERT_GE(report.clusters.size(), 2u) << report.ToString();
  const proto::BlockDesc& block = m.train.blocks(0);
  std::set<std::string> reshape_inputs, persistable;
  for (const auto& op : block.ops()) {
    if (op.type() != "reshape2") continue;
    for (const auto& a : AllInputArgs(op)) reshape_inputs.insert(a);
  }
  for (const auto& v : block.vars()) {
    if (v.persistable()) persistable.insert(v.name());
  }
  ASSERT_FALSE(reshape_inputs.empty());

  bool backward_seen = false, forward_seen = false;
  int donatable_total = 0;
  for (const auto& c : report.clusters) {
    const JitSubgraph& sg = jit_->cache().GetSubgraph(c.key);
    const std::vector<std::string> types = OpTypes(sg);
    const bool backward = Contains(types, "reshape2_grad");
    const bool forward = Contains(types, "reshape2") && !backward;
    SCOPED_TRACE(std::string(backward ? "backward" : forward ? "forward" : "other") + " cluster " + c.key);
    EXPECT_EQ(sg.shape_only_outputs, c.shape_only_outputs);
    EXPECT_EQ(sg.donatable_inputs, c.donatable_inputs);
    const proto::OpDesc* launch = FindLaunch(p, c.key);
    ASSERT_NE(launch, nullptr);
    EXPECT_EQ(StringsAttr(*launch, "shape_only_inputs"), c.shape_only_inputs);
    for (const auto& v : c.shape_only_inputs) {
      EXPECT_TRUE(Contains(c.inputs, v)) << v;
      EXPECT_FALSE(Contains(c.donatable_inputs, v)) << v << " is read for its shape only";
    }
    for (const auto& v : c.shape_only_outputs) {
      EXPECT_TRUE(Contains(c.outputs, v)) << v;
      EXPECT_FALSE(keep.count(v)) << v;
    }
    for (const auto& v : c.donatable_inputs) {
      EXPECT_TRUE(Contains(c.inputs, v)) << v;
      EXPECT_FALSE(keep.count(v)) << v << " is fed or fetched";
      EXPECT_FALSE(persistable.count(v)) << v << " is persistable";
      EXPECT_NE(v, m.features);
      EXPECT_NE(v, m.labels);
    }
    donatable_total += static_cast<int>(c.donatable_inputs.size());
    if (backward) {
      backward_seen = true;
      bool reshape_input = false;
      for (const auto& v : c.shape_only_inputs) reshape_input = reshape_input || reshape_inputs.count(v);
      EXPECT_TRUE(reshape_input) << report.ToString();
      EXPECT_TRUE(Contains(c.inputs, m.features)) << "the backward cluster reads the features";
    }
    if (forward) {
      forward_seen = true;
      EXPECT_FALSE(c.shape_only_outputs.empty()) << report.ToString();
      bool reshape_output = false;
      for (const auto& v : c.shape_only_outputs) reshape_output = reshape_output || reshape_inputs.count(v);
      EXPECT_TRUE(reshape_output) << report.ToString();
    }
  }
  EXPECT_TRUE(backward_seen) << report.ToString();
  EXPECT_TRUE(forward_seen) << report.ToString();
  EXPECT_GT(donatable_total, 0) << report.ToString();
  const std::string text = report.ToString();
  EXPECT_NE(text.find("shape-only inputs:"), std::string::npos) << text;
  EXPECT_NE(text.find("shape-only outputs:"), std::string::npos) << text;
  EXPECT_NE(text.find("inputs dying here:"), std::string::npos) << text;
}

// Fetching a var that died in a cluster keeps it from being donated.
TEST_F(JitPassMemoryTest, FetchingATransformerVarThatDiesInAClusterKeepsItFromBeingDonated) {
  const test::TinyTransformer tt(jit_);
  const Model& m = tt.model;
  const BuildJitPassOptions& o = tt.options;
  const BuildJitReport& report = tt.report;
  std::string dying;
  for (const auto& c : report.clusters) {
    if (dying.empty() && !c.donatable_inputs.empty()) dying = c.donatable_inputs.back();
  }
  ASSERT_FALSE(dying.empty());
  BuildJitPassOptions o2 = o;
  o2.keep_vars.insert(dying);
  BuildJitReport report2;
  jit_.ApplyBuildJit(m.train, o2, &report2);
  bool still_input = false;
  for (const auto& c : report2.clusters) {
    EXPECT_FALSE(Contains(c.donatable_inputs, dying)) << dying << " is fetched\n" << report2.ToString();
    still_input = still_input || Contains(c.inputs, dying);
  }
  EXPECT_TRUE(still_input) << report2.ToString();
}

TEST_F(JitPassMemoryTest, InputReadAfterTheClusterOrKeptIsNotDonatable) {
  struct Case {
    std::string what;
    bool later_reader;
    std::set<std::string> extra_keep;
    bool donatable;
  };
  for (const Case& c : std::vector<Case>{{"sm dies in the cluster", false, {}, true},
                                         {"sm read as data after the cluster", true, {}, false},
                                         {"sm fetched", false, {"sm"}, false}}) {
    SCOPED_TRACE(c.what);
    const proto::ProgramDesc program = test::DonorProgram(c.later_reader, 4, 12, 6);
    BuildJitPassOptions o;
    o.keep_vars = {"logits", "labels", "out", "ce"};
    o.deny_ops = {"softmax_with_cross_entropy"};  // sm comes from outside
    if (c.later_reader) o.keep_vars.insert("ce2");
    o.keep_vars.insert(c.extra_keep.begin(), c.extra_keep.end());
    BuildJitReport report;
    jit_.ApplyBuildJit(program, o, &report);
    ASSERT_EQ(report.clusters.size(), 1u) << report.ToString();
    const auto& cl = report.clusters[0];
    EXPECT_EQ(std::set<std::string>(cl.inputs.begin(), cl.inputs.end()), (std::set<std::string>{"sm", "w"}))
        << report.ToString();
    EXPECT_TRUE(cl.shape_only_inputs.empty());
    EXPECT_TRUE(cl.shape_only_outputs.empty());
    EXPECT_EQ(Contains(cl.donatable_inputs, "sm"), c.donatable) << report.ToString();
    EXPECT_FALSE(Contains(cl.donatable_inputs, "w")) << "persistable";
  }
}

}  // namespace
}  // namespace kiln
