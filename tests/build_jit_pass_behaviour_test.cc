// build_jit_pass's behaviour beyond its goldens: determinism, keys, input
// checks, random programs that must stay acyclic and equivalent, recompute
// copies; and the pass registry and runner.
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

// ---- Behaviour -------------------------------------------------------------------------

TEST(BuildJitPass, DeterministicAcrossRunsAndCopies) {
  const Model m = SmallMlp(OptimizerKind::kMomentum);
  auto first = RunPass(m.train, MlpOptions(m));
  auto second = RunPass(m.train, MlpOptions(m));
  EXPECT_TRUE(first->changed);
  EXPECT_EQ(first->text, second->text);
  EXPECT_EQ(first->sink.keys, second->sink.keys);
  ASSERT_EQ(first->sink.subgraphs.size(), second->sink.subgraphs.size());
  for (size_t i = 0; i < first->sink.subgraphs.size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(first->sink.subgraphs[i].block,
                                                                   second->sink.subgraphs[i].block));
  }
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(first->after, second->after));
  // Keys differ between distinct clusters.
  std::set<std::string> keys(first->sink.keys.begin(), first->sink.keys.end());
  EXPECT_EQ(keys.size(), first->sink.keys.size());
}

TEST(BuildJitPass, SecondRunDoesNotFire) {
  const Model m = SmallMlp(OptimizerKind::kSgd);
  Graph graph = Graph::FromBlock(m.train.blocks(0));
  RecordingSink sink;
  BuildJitReport report;
  BuildJitPass pass(MlpOptions(m), sink.sink(), &report);
  ASSERT_TRUE(pass.Run(graph));
  const std::string once = graph.Print();
  EXPECT_FALSE(pass.Run(graph));
  EXPECT_EQ(graph.Print(), once);
  int launches = 0;
  for (const auto& e : report.excluded) {
    if (e.type != "jit_launch") continue;
    ++launches;
    EXPECT_EQ(e.reason, JitExclusion::kNotLowerable);
  }
  EXPECT_EQ(launches, 1);  // the whole step
}

TEST(BuildJitPass, KeyComesFromTheSink) {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("a", {4, 8}).Var("b", {4, 8});
  p.Op(Unary("relu", "x", "a")).Op(Unary("exp", "a", "b"));
  Graph graph = Graph::FromBlock(p.program.blocks(0));
  int calls = 0;
  BuildJitPass pass({}, [&](const JitSubgraph& sg) {
    ++calls;
    EXPECT_EQ(sg.inputs, (std::vector<std::string>{"x"}));
    EXPECT_TRUE(sg.outputs.empty());  // b is neither read, kept nor persistable
    return std::string("key") + std::to_string(calls);
  });
  ASSERT_TRUE(pass.Run(graph));
  EXPECT_EQ(calls, 1);
  const proto::BlockDesc after = graph.ToBlock();
  ASSERT_EQ(after.ops_size(), 1);
  EXPECT_EQ(FindAttr(after.ops(0), "compilation_key")->s(), "key1");
}

TEST(BuildJitPass, FingerprintDependsOnEverything) {
  JitSubgraph a;
  *a.block.add_ops() = Unary("relu", "x", "y").Build();
  a.inputs = {"x"};
  a.outputs = {"y"};
  const std::string fa = JitSubgraphFingerprint(a);
  EXPECT_EQ(fa.size(), 16u);
  EXPECT_EQ(fa.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(JitSubgraphFingerprint(a), fa);
  JitSubgraph b = a;
  b.outputs = {};
  EXPECT_NE(JitSubgraphFingerprint(b), fa);
  JitSubgraph c = a;
  SetAttr(c.block.mutable_ops(0), "unused", Attribute(1.0f));
  EXPECT_NE(JitSubgraphFingerprint(c), fa);
  JitSubgraph d = a;
  d.inputs = {"x", "y"};
  d.outputs = {};
  JitSubgraph e = a;
  e.inputs = {"x"};
  e.outputs = {"y"};
  EXPECT_NE(JitSubgraphFingerprint(d), JitSubgraphFingerprint(e));
}

TEST(BuildJitPass, UndeclaredVarKeepsOpOut) {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("b", {4, 8}).Var("c", {4, 8});
  p.Op(Unary("relu", "x", "tmp"));  // tmp is not declared
  p.Op(Unary("exp", "tmp", "b")).Op(Unary("tanh", "b", "c"));
  Graph graph = Graph::FromBlock(p.program.blocks(0));
  RecordingSink sink;
  BuildJitReport report;
  BuildJitPass pass({}, sink.sink(), &report);
  EXPECT_FALSE(pass.Run(graph));
  ASSERT_EQ(report.excluded.size(), 3u);
  EXPECT_EQ(report.excluded[0].reason, JitExclusion::kUndeclaredVar);
  EXPECT_EQ(report.excluded[0].detail, "var 'tmp' is not declared");
  EXPECT_EQ(report.excluded[1].reason, JitExclusion::kUndeclaredVar);
  EXPECT_EQ(report.excluded[2].reason, JitExclusion::kClusterTooSmall);
  EXPECT_TRUE(report.clusters.empty());
}

TEST(BuildJitPass, UnknownTypesAndBadSizeAreRejected) {
  auto sink = [](const JitSubgraph&) { return std::string("k"); };
  BuildJitPassOptions allow;
  allow.allow_ops = {"relu", "rleu"};
  try {
    BuildJitPass pass(allow, sink);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "build_jit_pass: allow_ops (--jit_allow_ops) names unknown op type 'rleu'");
  }
  BuildJitPassOptions deny;
  deny.deny_ops = {"nope"};
  EXPECT_THROW(BuildJitPass(deny, sink), Error);
  BuildJitPassOptions size;
  size.min_cluster_size = 0;
  try {
    BuildJitPass pass(size, sink);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "build_jit_pass: min_cluster_size (--jit_min_cluster_size) must be at least 1, got 0");
  }
}

TEST(BuildJitPass, MinClusterSizeOneClustersLoneCandidate) {
  BuildJitPassOptions o;
  o.deny_ops = kStandIns;
  o.min_cluster_size = 1;
  o.keep_vars = {"loss"};
  auto r = RunPass(LoneCandidateProgram(), o);
  EXPECT_TRUE(r->changed);
  EXPECT_EQ(Types(r->after), (std::vector<std::string>{"jit_launch", "softmax_with_cross_entropy"}));
}

// Random programs of candidates, non-candidates and in-place writes: the
// pass must leave a valid graph (no cycle), keep clusters of the minimum
// size, account for every op, and compute the same thing.
TEST(BuildJitPass, RandomProgramsStayAcyclicAndEquivalent) {
  std::mt19937 rng(12345);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  int fired = 0, refused = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    ProgramMaker p;
    const int num_vars = 3 + pick(6);
    std::vector<std::string> names;
    for (int v = 0; v < num_vars; ++v) {
      names.push_back("v" + std::to_string(v));
      if (pick(4) == 0) {
        p.Param(names.back(), {4, 8});
      } else {
        p.Var(names.back(), {4, 8});
      }
    }
    p.Param("lr", {1});
    auto var = [&] { return names[pick(num_vars)]; };
    const int num_ops = 2 + pick(20);
    for (int i = 0; i < num_ops; ++i) {
      switch (pick(6)) {
        case 0:
          p.Op(Unary(std::vector<std::string>{"relu", "exp", "tanh", "scale"}[pick(4)], var(), var()));
          break;
        case 1:
        case 2:
          p.Op(Binary(pick(2) ? "elementwise_add" : "elementwise_mul", var(), var(), var()));
          break;
        case 3: {  // not registered: never a candidate
          OpBuilder host("host_op");
          host.In("X", pick(2) ? std::vector<std::string>{var()} : std::vector<std::string>{var(), var()});
          host.Out("Out", pick(2) ? std::vector<std::string>{var()} : std::vector<std::string>{var(), var()});
          p.Op(host);
          break;
        }
        case 4: {
          const std::string param = var();
          p.Op(OpBuilder("sgd").In("Param", {param}).In("Grad", {var()}).In("LearningRate", {"lr"}).Out("ParamOut",
                                                                                                      {param}));
          break;
        }
        default:
          p.Op(OpBuilder("fill_constant").Out("Out", {var()}).Attr("shape", std::vector<int64_t>{4, 8}));
      }
    }
    BuildJitPassOptions o;
    o.min_cluster_size = 1 + pick(3);
    if (pick(4) == 0) o.deny_ops = {"elementwise_mul"};
    for (const auto& n : names) {
      if (pick(3) == 0) o.keep_vars.insert(n);
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ":\n" + p.program.DebugString());
    auto r = RunPass(p.program, o);  // verifies the graph
    ExpectSameSemantics(p.program.blocks(0), r->after, r->sink.subgraphs, o.keep_vars);
    size_t clustered = 0;
    for (const auto& c : r->report.clusters) {
      EXPECT_GE(static_cast<int>(c.ops.size()), o.min_cluster_size);
      clustered += c.ops.size();
    }
    EXPECT_EQ(clustered + r->report.excluded.size(), static_cast<size_t>(num_ops));
    EXPECT_EQ(r->after.ops_size(),
              static_cast<int>(num_ops - clustered + r->report.clusters.size()));
    EXPECT_EQ(r->changed, !r->report.clusters.empty());
    fired += r->changed ? 1 : 0;
    for (const auto& e : r->report.excluded) refused += e.reason == JitExclusion::kCycle ? 1 : 0;
  }
  // The generator exercises both outcomes.
  EXPECT_GT(fired, 500);
  EXPECT_GT(refused, 300);
}

// ---- Recompute copies ----------------------------------------------------------------

// relu -> exp, the exp marked op_role="recompute" (a copy recompute_pass made
// for the backward): it never joins its producer's cluster, but joins a
// marked producer and unmarked consumers. A name ending in "@RECOMPUTE"
// alone means nothing.
TEST(BuildJitPass, RecomputeCopiesJoinOnlyTheirConsumers) {
  auto program = [](bool mark_exp, bool mark_relu, const std::string& b) {
    ProgramMaker p;
    p.Var("x", {4, 8}).Var("a", {4, 8}).Var(b, {4, 8}).Var("c", {4, 8});
    OpBuilder relu = Unary("relu", "x", "a"), exp = Unary("exp", "a", b);
    if (mark_relu) relu.Attr(kOpRoleAttr, std::string(kOpRoleRecompute));
    if (mark_exp) exp.Attr(kOpRoleAttr, std::string(kOpRoleRecompute));
    p.Op(relu).Op(exp).Op(Unary("tanh", b, "c"));
    return p.program;
  };
  BuildJitPassOptions o;
  o.keep_vars = {"x", "c"};
  auto clusters = [&](const proto::ProgramDesc& p) {
    std::vector<size_t> sizes;
    const auto result = RunPass(p, o);  // a range-for would not keep the temporary alive
    for (const auto& c : result->report.clusters) sizes.push_back(c.ops.size());
    return sizes;
  };
  EXPECT_EQ(clusters(program(false, false, "b")), std::vector<size_t>{3});
  EXPECT_EQ(clusters(program(false, false, "b@RECOMPUTE")), std::vector<size_t>{3});
  // relu alone is too small; exp and tanh merge.
  EXPECT_EQ(clusters(program(true, false, "b")), std::vector<size_t>{2});
  EXPECT_EQ(clusters(program(true, true, "b")), std::vector<size_t>{3});
}

// ---- Registry and pass runner ----------------------------------------------------------

TEST(PassRegistry, ListsAndCreatesPasses) {
  const PassRegistry& r = PassRegistry::Global();
  const std::vector<std::string> names = r.Names();
  EXPECT_NE(std::find(names.begin(), names.end(), "build_jit_pass"), names.end());
  ASSERT_NE(r.Find("build_jit_pass"), nullptr);
  EXPECT_FALSE(r.Find("build_jit_pass")->doc.empty());

  try {
    r.Create("build_jti_pass", PassConfig{});
    FAIL() << "expected NotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("unknown pass 'build_jti_pass' (known: attention_fusion_pass, build_jit_pass"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(r.Create("build_jit_pass", PassConfig{}), Error);  // no sink

  RecordingSink sink;
  BuildJitReport report;
  PassConfig config;
  config.jit_sink = sink.sink();
  config.build_jit.keep_vars = {"d"};
  config.build_jit_report = &report;
  auto pipeline = r.CreatePipeline({"build_jit_pass"}, config);
  ASSERT_EQ(pipeline.size(), 1u);
  EXPECT_EQ(pipeline[0]->name(), "build_jit_pass");

  Graph graph = Graph::FromBlock(ChainProgram().blocks(0));
  std::vector<std::string> dumped;
  EXPECT_TRUE(RunPasses(graph, pipeline, [&](const Pass& pass, const ir::Graph& g, bool changed) {
    dumped.push_back(std::string(pass.name()) + (changed ? " changed\n" : " unchanged\n") + g.Print());
  }));
  ASSERT_EQ(dumped.size(), 1u);
  EXPECT_EQ(dumped[0], "build_jit_pass changed\n" + graph.Print());
  ASSERT_EQ(report.clusters.size(), 1u);
  EXPECT_EQ(sink.subgraphs.size(), 1u);
  // Second pipeline run: nothing left to cluster.
  EXPECT_FALSE(RunPasses(graph, pipeline));
}

// A pass that breaks the graph: an op writing the input of the op it reads.
class CyclePass : public Pass {
 public:
  std::string_view name() const override { return "cycle_pass"; }
  bool Run(ir::Graph& graph) const override {
    const NodeId x = graph.FindVar("x");
    const NodeId a = graph.FindVar("a");
    graph.AddOpNode(OpBuilder("exp").Build(), {{"X", {a}}}, {{"Out", {x}}});
    return true;
  }
};

TEST(RunPasses, VerifiesAfterEveryPass) {
  Graph graph = Graph::FromBlock(ChainProgram().blocks(0));
  CyclePass bad;
  int dumps = 0;
  try {
    RunPasses(graph, std::vector<const Pass*>{&bad}, [&](const Pass&, const ir::Graph&, bool) { ++dumps; });
    FAIL() << "expected an invalid graph";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_EQ(std::string(e.what()).rfind("invalid graph after pass 'cycle_pass':\n", 0), 0u) << e.what();
  }
  EXPECT_EQ(dumps, 0);
  // A broken input is blamed on no pass.
  try {
    RunPasses(graph, std::vector<const Pass*>{});
    FAIL() << "expected an invalid graph";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("invalid graph before any pass:\n", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace kiln
