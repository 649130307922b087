// recompute_pass: goldens for where it fires and where it must not (fetched,
// not an anchor, not a listed type), what it recomputes in the model
// programs, its options, and training with the pass on and off (the same
// losses to the bit on both kernel sets; with the JIT the copies join the
// backward cluster).
#include "passes/recompute_pass.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "framework/backward.h"
#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/models/models.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/trainer.h"
#include "framework/validate.h"
#include "passes/pass_registry.h"
#include "passes/pipeline.h"
#include "tests/golden_util.h"
#include "tests/program_maker.h"
#include "tests/test_jit.h"
#include "tests/train_cases.h"

namespace kiln {
namespace {

using ir::Graph;
using test::TrainCase;

const std::set<std::string> kAllTypes = {"softmax", "gelu", "relu", "sigmoid", "tanh", "layer_norm", "matmul"};

// ---- Helpers -----------------------------------------------------------------

const TrainCase& Case(const std::string& name) {
  static const std::vector<TrainCase> cases = test::SmallTrainCases();
  for (const auto& c : cases) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no train case " << name;
  return cases.front();
}

std::set<std::string> Keep(const Model& m) { return {m.features, m.labels, m.loss}; }

// The options of these tests: keep the feeds and fetch targets, recompute
// `types` (by default every type worth it), chains of up to `max_chain` ops.
RecomputePassOptions Options(const std::set<std::string>& keep, const std::set<std::string>& types = kAllTypes,
                             int max_chain = 2) {
  RecomputePassOptions o;
  o.keep_vars = keep;
  o.op_types = types;
  o.max_chain = max_chain;
  return o;
}

// Runs the pass on block 0 of `p`; returns whether it changed anything.
bool Recompute(proto::ProgramDesc* p, const RecomputePassOptions& o, RecomputeReport* report = nullptr) {
  Graph graph = Graph::FromBlock(p->blocks(0));
  const bool changed = RecomputePass(o, report).Run(graph);
  graph.Verify();
  *p->mutable_blocks(0) = graph.ToBlock();
  return changed;
}

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
    for (const auto& a : AllOutputArgs(block.ops(i))) {
      if (a.find("@GRAD") != std::string::npos) return i;
    }
  }
  return -1;
}

using test::OutputDecl;
using test::ProgramMaker;

OpBuilder LayerNorm(const std::string& x, const std::string& y, const std::string& prefix) {
  return OpBuilder("layer_norm")
      .In("X", {x})
      .In("Scale", {prefix + ".scale"})
      .In("Bias", {prefix + ".bias"})
      .Out("Y", {y})
      .Out("Mean", {y + ".mean"})
      .Out("Variance", {y + ".var"});
}
OpBuilder MatMul(const std::string& x, const std::string& y, const std::string& out) {
  return OpBuilder("matmul").In("X", {x}).In("Y", {y}).Out("Out", {out});
}
OpBuilder Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out});
}

std::string Join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// ---- Goldens -------------------------------------------------------------------

std::string GoldenDir() { return std::string(KILN_SOURCE_DIR) + "/tests/golden/recompute_pass/"; }
// Runs the pass on block 0 and renders: options, the graph before and after,
// and the report. The input program lives beside the golden; the builder must
// still produce it.
RecomputeReport CheckGolden(const std::string& name, const proto::ProgramDesc& built, const RecomputePassOptions& o,
                            bool expect_change) {
  const std::string input_path = GoldenDir() + name + ".pbtxt";
  const std::string golden_path = GoldenDir() + name + ".golden";
  if (test::UpdateGolden()) WriteFileAtomic(input_path, ProgramToText(built));
  const proto::ProgramDesc program = LoadProgram(input_path);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(program, built))
      << input_path << " differs from the test's builder; regenerate with KILN_UPDATE_GOLDEN=1";
  ValidateProgram(program);

  RecomputeReport report;
  Graph graph = Graph::FromBlock(program.blocks(0));
  const std::string before = graph.Print();
  const bool changed = RecomputePass(o, &report).Run(graph);
  graph.Verify();
  EXPECT_EQ(changed, expect_change) << name;
  proto::ProgramDesc after = program;
  *after.mutable_blocks(0) = graph.ToBlock();
  ValidateProgram(after);

  std::string t = "# " + name + ": recompute_pass golden (regenerate with KILN_UPDATE_GOLDEN=1)\n";
  t += "# options: keep_vars=[" + Join(o.keep_vars) + "] op_types=[" + Join(o.op_types) +
       "] max_chain=" + std::to_string(o.max_chain) + "\n";
  t += "## before\n" + before;
  t += std::string("## after: ") + (changed ? "changed" : "unchanged") + "\n" + graph.Print();
  t += "## report\n" + report.ToString() + "\n";
  test::ExpectGolden(golden_path, t);
  return report;
}

// x -> layer_norm -> h -> matmul -> mean: matmul_grad reads h, which is
// recomputed from x and the layer_norm parameters (all kept anyway) in the
// backward pass, marked op_role="recompute".
TEST(RecomputePassGolden, LayerNormIsCopiedIntoTheBackward) {
  ProgramMaker p(OutputDecl::kByShapeInference);
  p.Input("x", {-1, 8}).Param("ln.scale", {8}).Param("ln.bias", {8}).Param("w", {8, 4});
  p.Op(LayerNorm("x", "h", "ln")).Op(MatMul("h", "w", "out")).Op(Unary("mean", "out", "loss"));
  const RecomputeReport r =
      CheckGolden("layer_norm", p.WithBackward("loss"), Options({"x", "loss"}, {"layer_norm"}), true);
  ASSERT_EQ(r.vars.size(), 1u);
  EXPECT_EQ(r.vars[0].name, "h");
  EXPECT_EQ(r.vars[0].op_types, std::vector<std::string>{"layer_norm"});
}

// Attention-like: the scores matmul feeds only the softmax, so the pair is
// copied as one chain of two ops; with max_chain 1 the softmax stays kept.
TEST(RecomputePassGolden, SoftmaxWithItsScores) {
  ProgramMaker p(OutputDecl::kByShapeInference);
  p.Input("q", {-1, 4}).Param("k", {4, 6}).Param("v", {6, 3});
  p.Op(MatMul("q", "k", "scores")).Op(Unary("softmax", "scores", "probs")).Op(MatMul("probs", "v", "ctx"));
  p.Op(Unary("mean", "ctx", "loss"));
  const proto::ProgramDesc program = p.WithBackward("loss");
  const RecomputeReport r = CheckGolden("softmax_scores", program, Options({"q", "loss"}), true);
  ASSERT_EQ(r.vars.size(), 1u);
  EXPECT_EQ(r.vars[0].name, "probs");
  EXPECT_EQ(r.vars[0].op_types, (std::vector<std::string>{"matmul", "softmax"}));
  proto::ProgramDesc short_chain = program;
  EXPECT_FALSE(Recompute(&short_chain, Options({"q", "loss"}, kAllTypes, 1)));
}

// Does not fire: layer_norm's output is fetched (so none of its outputs is
// copied), relu's input is neither kept for the backward nor an anchor, and
// a forward-only program has no backward to recompute into.
TEST(RecomputePassGolden, FetchedAndNonAnchorDoNotFire) {
  ProgramMaker p(OutputDecl::kByShapeInference);
  p.Input("x", {-1, 8}).Param("ln.scale", {8}).Param("ln.bias", {8}).Param("w", {8, 4});
  p.Op(LayerNorm("x", "h", "ln")).Op(Unary("relu", "h", "r")).Op(MatMul("r", "w", "out"));
  p.Op(Unary("mean", "out", "loss"));
  const RecomputeReport r = CheckGolden("not_fired", p.WithBackward("loss"), Options({"x", "h", "loss"}), false);
  EXPECT_TRUE(r.vars.empty());
  EXPECT_EQ(r.ToString(), "recomputed nothing");
  proto::ProgramDesc forward_only = p.program;
  EXPECT_FALSE(Recompute(&forward_only, Options({"x", "loss"})));
}

TEST(RecomputePassGolden, TransformerTrain) {
  const Model m = BuildTransformer(TransformerConfig{}, TrainConfig{});
  const RecomputeReport r = CheckGolden("transformer_train", m.train, Options(Keep(m)), true);
  EXPECT_EQ(r.vars.size(), 3u) << r.ToString();
}

// ---- Model programs and options --------------------------------------------------

TEST(RecomputePass, TransformerRecomputesSoftmaxLayerNormAndGelu) {
  const TrainCase& c = Case("transformer");
  proto::ProgramDesc p = c.model.train;
  RecomputeReport report;
  ASSERT_TRUE(Recompute(&p, Options(Keep(c.model)), &report));
  std::vector<std::string> names;
  for (const auto& v : report.vars) names.push_back(v.name);
  EXPECT_EQ(names, (std::vector<std::string>{"softmax_0", "ln1_0.Y", "gelu_0"})) << report.ToString();
  EXPECT_EQ(report.vars[0].op_types, (std::vector<std::string>{"matmul", "softmax"}));
  const proto::BlockDesc& block = p.blocks(0);
  const int bwd = FirstGradOp(block);
  ASSERT_GT(bwd, 0);
  for (const auto& v : report.vars) {
    // The forward value is no longer read by the backward; its copy is, and
    // the copy, marked as one, is written just before its first reader.
    for (int r : Readers(block, v.name)) EXPECT_LT(r, bwd) << v.name << " read by op " << r;
    const std::string copy = v.name + "@RECOMPUTE";
    const auto readers = Readers(block, copy);
    ASSERT_FALSE(readers.empty()) << copy;
    int writer = -1;
    for (int i = 0; i < block.ops_size(); ++i) {
      const auto outs = AllOutputArgs(block.ops(i));
      if (std::find(outs.begin(), outs.end(), copy) != outs.end()) writer = i;
    }
    ASSERT_GT(writer, bwd) << copy;
    EXPECT_EQ(writer + 1, readers.front()) << copy;
    EXPECT_TRUE(HasOpRole(block.ops(writer), kOpRoleRecompute)) << copy;
    EXPECT_NE(FindVarDesc(block, copy), nullptr) << copy;
  }
  int marked = 0;
  for (const auto& op : block.ops()) marked += HasOpRole(op, kOpRoleRecompute);
  EXPECT_EQ(marked, 4);  // matmul, softmax, layer_norm, gelu
  EXPECT_NO_THROW(ValidateProgram(p));
}

TEST(RecomputePass, MlpAndCnnHaveNothingWorthRecomputing) {
  for (const std::string name : {"mlp", "cnn"}) {
    const TrainCase& c = Case(name);
    proto::ProgramDesc p = c.model.train;
    RecomputeReport report;
    // relu's input is not kept for the backward (relu_grad reads Out), so
    // relu cannot be recomputed from anchors.
    EXPECT_FALSE(Recompute(&p, Options(Keep(c.model)), &report)) << name << ": " << report.ToString();
    EXPECT_EQ(report.ToString(), "recomputed nothing");
  }
}

TEST(RecomputePass, RespectsOpTypesKeepVarsAndMaxChain) {
  const Model& m = Case("transformer").model;
  struct Run {
    std::string what;
    RecomputePassOptions options;
    std::vector<std::string> expect;  // recomputed vars
  };
  RecomputePassOptions defaults;
  defaults.keep_vars = Keep(m);  // the default types: layer_norm only
  std::set<std::string> keep_gelu = Keep(m);
  keep_gelu.insert("gelu_0");  // fetched: must stay as computed
  const std::vector<Run> runs = {
      {"default types", defaults, {"ln1_0.Y"}},
      {"gelu only", Options(Keep(m), {"gelu"}), {"gelu_0"}},
      {"gelu fetched", Options(keep_gelu, {"gelu"}), {}},
      // The scores matmul no longer fits: softmax is kept.
      {"max_chain 1", Options(Keep(m), kAllTypes, 1), {"ln1_0.Y", "gelu_0"}},
  };
  for (const Run& run : runs) {
    proto::ProgramDesc p = m.train;
    RecomputeReport report;
    EXPECT_EQ(Recompute(&p, run.options, &report), !run.expect.empty()) << run.what;
    std::vector<std::string> names;
    for (const auto& v : report.vars) names.push_back(v.name);
    EXPECT_EQ(names, run.expect) << run.what;
  }
}

TEST(RecomputePass, BadOptionsThrowAndTheRegistryCreatesIt) {
  try {
    RecomputePass(Options({}, {"layer_nrom"}));
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "recompute_pass: op_types (--recompute_ops) names unknown op type 'layer_nrom'");
  }
  EXPECT_THROW(RecomputePass(Options({}, {"layer_norm"}, 0)), Error);

  PassConfig config;
  config.recompute = Options(Keep(Case("transformer").model), {"gelu"});
  RecomputeReport report;
  config.recompute_report = &report;
  auto pass = PassRegistry::Global().Create("recompute_pass", config);
  EXPECT_EQ(pass->name(), "recompute_pass");
  Graph graph = Graph::FromBlock(Case("transformer").model.train.blocks(0));
  EXPECT_TRUE(RunPasses(graph, {pass.get()}));
  EXPECT_EQ(report.ToString(), "recomputed gelu_0 (gelu)");
}

// ---- Training with the pass on and off ---------------------------------------------

TrainOptions ShortTraining() {
  TrainOptions o;
  o.epochs = 100;
  o.batch_size = 16;
  o.max_steps = 12;
  return o;
}

// Same ops on the same inputs: the losses are bit-identical with the framework
// kernels, and within the JIT tolerance with the JIT on.
TEST(RecomputePassTrain, TransformerLossesMatch) {
  const TrainCase& c = Case("transformer");
  for (bool onednn : {true, false}) {
    TrainOptions o = ShortTraining();
    o.exec.use_onednn = onednn;
    const TrainResult off = Train(c.model, c.train, c.test, o);
    o.program_transform = [](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
      proto::ProgramDesc out = p;
      Recompute(&out, Options(keep));
      return out;
    };
    const TrainResult on = Train(c.model, c.train, c.test, o);
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t i = 0; i < on.losses.size(); ++i) {
      EXPECT_EQ(on.losses[i], off.losses[i]) << (onednn ? "oneDNN" : "reference") << " step " << i;
    }
  }
}

// The production pipeline with recompute_pass and build_jit_pass, its
// subgraphs stored in `jit`.
PipelineOptions RecomputeAndJit(test::TestJit& jit, const std::set<std::string>& keep,
                                BuildJitReport* report = nullptr) {
  PipelineOptions o = jit.Pipeline(BuildJitPassOptions{}, report);
  o.recompute = true;
  o.config.recompute = Options({});
  o.keep_vars = keep;
  return o;
}

TEST(RecomputePassTrain, TransformerWithTheJitMatches) {
  test::TestJit jit;
  const TrainCase& c = Case("transformer");
  TrainOptions o = ShortTraining();
  const TrainResult off = Train(c.model, c.train, c.test, o);
  o.registry = &jit.registry();
  o.program_transform = [&jit](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    return RunPipeline(p, RecomputeAndJit(jit, keep), jit.registry());
  };
  const TrainResult on = Train(c.model, c.train, c.test, o);
  EXPECT_GT(jit->stats().compiles, 0);
  ASSERT_EQ(on.losses.size(), off.losses.size());
  for (size_t i = 0; i < on.losses.size(); ++i) {
    EXPECT_NEAR(on.losses[i], off.losses[i], 1e-4 * std::max(1.0f, std::fabs(off.losses[i]))) << "step " << i;
  }
}

// The copies join the backward cluster: the forward cluster no longer hands
// the recomputed activations out.
TEST(RecomputePassTrain, CopiesJoinTheBackwardCluster) {
  test::TestJit jit;
  const TrainCase& c = Case("transformer");
  BuildJitReport report;
  RunPipeline(c.model.train, RecomputeAndJit(jit, Keep(c.model), &report), jit.registry());
  ASSERT_GE(report.clusters.size(), 2u);
  bool copies_clustered = false;
  for (const auto& cl : report.clusters) {
    for (const auto& op : cl.ops) copies_clustered = copies_clustered || op.find("new op 'softmax'") != std::string::npos;
    for (const std::string v : {"softmax_0", "gelu_0", "ln1_0.Y"}) {
      EXPECT_EQ(std::count(cl.outputs.begin(), cl.outputs.end(), v), 0) << "cluster " << cl.key << " hands out " << v;
      EXPECT_EQ(std::count(cl.outputs.begin(), cl.outputs.end(), v + "@RECOMPUTE"), 0) << cl.key;
    }
  }
  EXPECT_TRUE(copies_clustered);
}

}  // namespace
}  // namespace kiln
