#include "passes/recompute_pass.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compiler/jit_compiler.h"
#include "framework/op_desc.h"
#include "framework/trainer.h"
#include "framework/validate.h"
#include "launch_op/jit_launch_op.h"
#include "launch_op/jit_pipeline.h"
#include "tests/train_cases.h"

namespace kiln {
namespace {

using test::TrainCase;

const std::set<std::string> kAllTypes = {"softmax", "gelu", "relu", "sigmoid", "tanh", "layer_norm", "matmul"};

const TrainCase& Case(const std::string& name) {
  static const std::vector<TrainCase> cases = test::SmallTrainCases();
  for (const auto& c : cases) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no train case " << name;
  return cases.front();
}

std::set<std::string> Keep(const Model& m) { return {m.features, m.labels, m.loss}; }

// Ops of block 0 reading `var`, by index.
std::vector<int> Readers(const proto::BlockDesc& block, const std::string& var) {
  std::vector<int> out;
  for (int i = 0; i < block.ops_size(); ++i) {
    for (const auto& s : block.ops(i).inputs()) {
      if (std::find(s.args().begin(), s.args().end(), var) != s.args().end()) out.push_back(i);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int FirstGradOp(const proto::BlockDesc& block) {
  for (int i = 0; i < block.ops_size(); ++i) {
    for (const auto& s : block.ops(i).outputs()) {
      for (const auto& a : s.args()) {
        if (a.find("@GRAD") != std::string::npos) return i;
      }
    }
  }
  return -1;
}

TEST(RecomputePass, TransformerRecomputesSoftmaxLayerNormAndGelu) {
  const TrainCase& c = Case("transformer");
  proto::ProgramDesc p = c.model.train;
  RecomputePassOptions o;
  o.keep_vars = Keep(c.model);
  o.op_types = kAllTypes;
  RecomputeReport report;
  ASSERT_TRUE(RecomputePass(&p, o, &report));
  std::vector<std::string> names;
  for (const auto& v : report.vars) names.push_back(v.name);
  EXPECT_EQ(names, (std::vector<std::string>{"softmax_0", "ln1_0.Y", "gelu_0"})) << report.ToString();
  EXPECT_EQ(report.vars[0].op_types, (std::vector<std::string>{"matmul", "softmax"}));
  const proto::BlockDesc& block = p.blocks(0);
  const int bwd = FirstGradOp(block);
  ASSERT_GT(bwd, 0);
  for (const auto& v : report.vars) {
    // The forward value is no longer read by the backward; its copy is, and
    // the copy is written before its first reader.
    for (int r : Readers(block, v.name)) EXPECT_LT(r, bwd) << v.name << " read by op " << r;
    const std::string copy = v.name + "@RECOMPUTE";
    const auto readers = Readers(block, copy);
    ASSERT_FALSE(readers.empty()) << copy;
    int writer = -1;
    for (int i = 0; i < block.ops_size(); ++i) {
      for (const auto& s : block.ops(i).outputs()) {
        if (std::find(s.args().begin(), s.args().end(), copy) != s.args().end()) writer = i;
      }
    }
    EXPECT_GT(writer, bwd) << copy;
    EXPECT_LT(writer, readers.front()) << copy;
    EXPECT_NE(FindVarDesc(block, copy), nullptr) << copy;
  }
  EXPECT_NO_THROW(ValidateProgram(p));
}

TEST(RecomputePass, MlpAndCnnHaveNothingWorthRecomputing) {
  for (const std::string name : {"mlp", "cnn"}) {
    const TrainCase& c = Case(name);
    proto::ProgramDesc p = c.model.train;
    RecomputePassOptions o;
    o.keep_vars = Keep(c.model);
    o.op_types = kAllTypes;
    RecomputeReport report;
    // relu's input is not kept for the backward (relu_grad reads Out), so
    // relu cannot be recomputed from anchors.
    EXPECT_FALSE(RecomputePass(&p, o, &report)) << name << ": " << report.ToString();
    EXPECT_EQ(report.ToString(), "recomputed nothing");
  }
}

TEST(RecomputePass, RespectsOpTypesKeepVarsAndForwardOnlyPrograms) {
  const TrainCase& c = Case("transformer");
  {
    proto::ProgramDesc p = c.model.train;
    RecomputePassOptions o;  // the default: layer_norm only
    o.keep_vars = Keep(c.model);
    RecomputeReport report;
    ASSERT_TRUE(RecomputePass(&p, o, &report));
    ASSERT_EQ(report.vars.size(), 1u);
    EXPECT_EQ(report.vars[0].name, "ln1_0.Y");
  }
  {
    proto::ProgramDesc p = c.model.train;
    RecomputePassOptions o;
    o.keep_vars = Keep(c.model);
    o.op_types = {"gelu"};
    RecomputeReport report;
    ASSERT_TRUE(RecomputePass(&p, o, &report));
    ASSERT_EQ(report.vars.size(), 1u);
    EXPECT_EQ(report.vars[0].name, "gelu_0");
  }
  {
    proto::ProgramDesc p = c.model.train;
    RecomputePassOptions o;
    o.keep_vars = Keep(c.model);
    o.keep_vars.insert("gelu_0");  // fetched: must stay as computed
    o.op_types = {"gelu"};
    EXPECT_FALSE(RecomputePass(&p, o, nullptr));
  }
  {
    proto::ProgramDesc p = c.model.train;
    RecomputePassOptions o;
    o.keep_vars = Keep(c.model);
    o.op_types = kAllTypes;
    o.max_chain = 1;  // the scores matmul no longer fits: softmax is kept
    RecomputeReport report;
    ASSERT_TRUE(RecomputePass(&p, o, &report));
    for (const auto& v : report.vars) EXPECT_NE(v.name, "softmax_0");
  }
  {
    proto::ProgramDesc p = c.model.forward;  // no backward pass
    RecomputePassOptions o;
    o.keep_vars = {c.model.features};
    EXPECT_FALSE(RecomputePass(&p, o, nullptr));
  }
}

TrainOptions Options() {
  TrainOptions o;
  o.epochs = 100;
  o.batch_size = 16;
  o.max_steps = 12;
  return o;
}

proto::ProgramDesc Recompute(const proto::ProgramDesc& p, const std::set<std::string>& keep) {
  proto::ProgramDesc out = p;
  RecomputePassOptions o;
  o.keep_vars = keep;
  o.op_types = kAllTypes;
  RecomputePass(&out, o, nullptr);
  return out;
}

// Same ops on the same inputs: the losses are bit-identical with the framework
// kernels, and within the JIT tolerance with the JIT on.
TEST(RecomputePassTrain, TransformerLossesMatch) {
  const TrainCase& c = Case("transformer");
  for (bool onednn : {true, false}) {
    TrainOptions o = Options();
    o.exec.use_onednn = onednn;
    const TrainResult off = Train(c.model, c.train, c.test, o);
    o.program_transform = Recompute;
    const TrainResult on = Train(c.model, c.train, c.test, o);
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t i = 0; i < on.losses.size(); ++i) {
      EXPECT_EQ(on.losses[i], off.losses[i]) << (onednn ? "oneDNN" : "reference") << " step " << i;
    }
  }
}

TEST(RecomputePassTrain, TransformerWithTheJitMatches) {
  jit::RegisterJitOps(OpRegistry::GlobalForRegistration());
  jit::JitCompiler::Instance().ClearCache();
  const TrainCase& c = Case("transformer");
  TrainOptions o = Options();
  const TrainResult off = Train(c.model, c.train, c.test, o);
  o.program_transform = [](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    BuildJitPassOptions jo;
    jo.keep_vars = keep;
    return jit::ApplyBuildJitPass(Recompute(p, keep), jo);
  };
  const TrainResult on = Train(c.model, c.train, c.test, o);
  ASSERT_EQ(on.losses.size(), off.losses.size());
  for (size_t i = 0; i < on.losses.size(); ++i) {
    EXPECT_NEAR(on.losses[i], off.losses[i], 1e-4 * std::max(1.0f, std::fabs(off.losses[i]))) << "step " << i;
  }
}

// The copies join the backward cluster: the forward cluster no longer hands
// the recomputed activations out.
TEST(RecomputePassTrain, CopiesJoinTheBackwardCluster) {
  jit::RegisterJitOps(OpRegistry::GlobalForRegistration());
  const TrainCase& c = Case("transformer");
  const std::set<std::string> keep = Keep(c.model);
  BuildJitPassOptions jo;
  jo.keep_vars = keep;
  BuildJitReport report;
  jit::ApplyBuildJitPass(Recompute(c.model.train, keep), jo, &report);
  ASSERT_GE(report.clusters.size(), 2u);
  bool copies_clustered = false;
  for (const auto& cl : report.clusters) {
    for (const auto& op : cl.ops) copies_clustered = copies_clustered || op.find("softmax") != std::string::npos;
    for (const std::string v : {"softmax_0", "gelu_0", "ln1_0.Y"}) {
      EXPECT_EQ(std::count(cl.outputs.begin(), cl.outputs.end(), v), 0) << "cluster " << cl.key << " hands out " << v;
      EXPECT_EQ(std::count(cl.outputs.begin(), cl.outputs.end(), v + "@RECOMPUTE"), 0) << cl.key;
    }
  }
  EXPECT_TRUE(copies_clustered);
}

}  // namespace
}  // namespace kiln
