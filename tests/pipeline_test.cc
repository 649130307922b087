// passes/pipeline: the list and its order for every combination of options,
// verification after every pass (a pass that breaks the graph is named), the
// dump directory (one file per pass that ran, in order), an unusable dump
// directory, the reports.
#include "passes/pipeline.h"

#include <sys/stat.h>

#include <cstdlib>
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

namespace kiln {
namespace {

using ir::Graph;
using ir::NodeId;

std::vector<std::string> Names(const std::vector<std::unique_ptr<Pass>>& passes) {
  std::vector<std::string> out;
  for (const auto& p : passes) out.emplace_back(p->name());
  return out;
}

// Every pass on, subgraphs keyed by their fingerprint.
PipelineOptions AllOn(const std::set<std::string>& keep) {
  PipelineOptions o;
  o.recompute = o.build_jit = o.inplace = true;
  o.config.recompute.op_types = {"softmax", "matmul", "layer_norm", "gelu"};
  o.config.jit_sink = [](const JitSubgraph& sg) { return JitSubgraphFingerprint(sg); };
  o.keep_vars = keep;
  return o;
}

// Files in `dir`, sorted.
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  FILE* ls = ::popen(("ls " + dir).c_str(), "r");
  char name[512];
  while (std::fscanf(ls, "%511s", name) == 1) out.emplace_back(name);
  ::pclose(ls);
  return out;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kiln_pipeline_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0);
  }
  std::string dir_;
};

TEST_F(PipelineTest, ListsThePassesInOrderForEveryCombination) {
  const std::vector<std::string> order = {"recompute_pass", "build_jit_pass", "inplace_pass"};
  for (int mask = 0; mask < 8; ++mask) {
    PipelineOptions o = AllOn({});
    o.recompute = mask & 1;
    o.build_jit = mask & 2;
    o.inplace = mask & 4;
    std::vector<std::string> expect;
    for (int i = 0; i < 3; ++i) {
      if (mask & (1 << i)) expect.push_back(order[i]);
    }
    EXPECT_EQ(Names(BuildPipeline(o)), expect) << "mask " << mask;
  }
}

TEST_F(PipelineTest, BadOptionsThrow) {
  PipelineOptions o;
  o.build_jit = true;  // no sink
  EXPECT_THROW(BuildPipeline(o), Error);
  o = AllOn({});
  o.config.recompute.op_types = {"nope"};
  EXPECT_THROW(BuildPipeline(o), Error);
  o.recompute = false;  // a pass that does not run is not built
  EXPECT_NO_THROW(BuildPipeline(o));
}

TEST_F(PipelineTest, RunsEveryPassOnOneGraphAndFillsTheReports) {
  const Model m = BuildTransformer(TransformerConfig{}, TrainConfig{});
  PipelineOptions o = AllOn({m.features, m.labels, m.loss});
  RecomputeReport recompute;
  BuildJitReport jit;
  InplaceReport inplace;
  o.config.recompute_report = &recompute;
  o.config.build_jit_report = &jit;
  o.config.inplace_report = &inplace;
  const proto::ProgramDesc out = RunPipeline(m.train, o);
  EXPECT_EQ(recompute.vars.size(), 3u) << recompute.ToString();
  EXPECT_GE(jit.clusters.size(), 2u);
  int launches = 0;
  for (const auto& op : out.blocks(0).ops()) launches += op.type() == "jit_launch";
  EXPECT_EQ(launches, static_cast<int>(jit.clusters.size()));
  // The keep vars reached every pass: the loss is still written.
  bool loss_written = false;
  for (const auto& op : out.blocks(0).ops()) {
    for (const auto& a : AllOutputArgs(op)) loss_written = loss_written || a == m.loss;
  }
  EXPECT_TRUE(loss_written);

  // A pass that does not run leaves its report empty.
  o.recompute = false;
  o.build_jit = false;
  RunPipeline(m.train, o);
  EXPECT_TRUE(recompute.vars.empty());
  EXPECT_TRUE(jit.clusters.empty());
  EXPECT_FALSE(inplace.renamed.empty());

  // Nothing on: the program comes back as it was.
  o.inplace = false;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(RunPipeline(m.train, o), m.train));
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

// A pass that changes nothing.
class NoopPass : public Pass {
 public:
  std::string_view name() const override { return "noop_pass"; }
  bool Run(ir::Graph&) const override { return false; }
};

proto::ProgramDesc SmallProgram() {
  proto::ProgramDesc p;
  p.set_version(1);
  proto::BlockDesc* b = p.add_blocks();
  b->set_parent_idx(-1);
  for (const char* name : {"x", "a", "b"}) {
    proto::VarDesc* v = b->add_vars();
    v->set_name(name);
    v->set_dtype(proto::FP32);
    v->add_dims(4);
  }
  *b->add_ops() = OpBuilder("relu").In("X", {"x"}).Out("Out", {"a"}).Build();
  *b->add_ops() = OpBuilder("exp").In("X", {"a"}).Out("Out", {"b"}).Build();
  return p;
}

TEST_F(PipelineTest, VerifiesAfterEveryPassAndNamesTheOneThatBrokeTheGraph) {
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(std::make_unique<NoopPass>());
  passes.push_back(std::make_unique<CyclePass>());
  passes.push_back(std::make_unique<NoopPass>());
  try {
    TransformProgram(SmallProgram(), passes, dir_);
    FAIL() << "expected an invalid graph";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_EQ(std::string(e.what()).rfind("invalid graph after pass 'cycle_pass':\n", 0), 0u) << e.what();
  }
  // The dumps stop before the broken graph.
  EXPECT_EQ(Files(dir_), (std::vector<std::string>{"00_input.pbtxt", "01_noop_pass.pbtxt"}));
  proto::ProgramDesc empty;
  EXPECT_THROW(TransformProgram(empty, passes), Error);
}

TEST_F(PipelineTest, DumpsOneFilePerPassThatRanInOrder) {
  const Model m = BuildTransformer(TransformerConfig{}, TrainConfig{});
  PipelineOptions o = AllOn({m.features, m.labels, m.loss});
  o.dump_dir = dir_ + "/nested/passes";  // created with its parents
  const proto::ProgramDesc out = RunPipeline(m.train, o);
  const std::string d = o.dump_dir + "/";
  ASSERT_EQ(Files(d), (std::vector<std::string>{"00_input.pbtxt", "01_recompute_pass.pbtxt",
                                                "02_build_jit_pass.pbtxt", "03_inplace_pass.pbtxt"}));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(LoadProgram(d + "00_input.pbtxt"), m.train));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(LoadProgram(d + "03_inplace_pass.pbtxt"), out));
  const std::string recomputed = ReadFile(d + "01_recompute_pass.pbtxt");
  EXPECT_NE(recomputed.find("s: \"recompute\""), std::string::npos);
  EXPECT_EQ(recomputed.find("jit_launch"), std::string::npos);
  EXPECT_NE(ReadFile(d + "02_build_jit_pass.pbtxt").find("jit_launch"), std::string::npos);

  // Only the passes that run; an existing directory is reused.
  o.recompute = o.build_jit = false;
  o.dump_dir = dir_ + "/inplace";
  RunPipeline(m.train, o);
  EXPECT_EQ(Files(o.dump_dir), (std::vector<std::string>{"00_input.pbtxt", "01_inplace_pass.pbtxt"}));
  RunPipeline(m.train, o);
  o.inplace = false;
  o.dump_dir = dir_ + "/none";
  RunPipeline(m.train, o);
  EXPECT_EQ(Files(o.dump_dir), std::vector<std::string>{"00_input.pbtxt"});
}

TEST_F(PipelineTest, UnusableDumpDirectoryFailsBeforeAnyPassRuns) {
  ASSERT_EQ(std::system(("mkdir -p " + dir_ + " && touch " + dir_ + "/file").c_str()), 0);
  const Model m = BuildMlp(MlpConfig{}, TrainConfig{});
  PipelineOptions o = AllOn({m.features, m.labels, m.loss});
  int subgraphs = 0;
  o.config.jit_sink = [&subgraphs](const JitSubgraph& sg) {
    ++subgraphs;
    return JitSubgraphFingerprint(sg);
  };
  for (const std::string& bad : {dir_ + "/file", dir_ + "/file/sub"}) {
    o.dump_dir = bad;
    try {
      RunPipeline(m.train, o);
      FAIL() << "expected an error for " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()).rfind("pass dump directory '" + bad + "': ", 0), 0u) << e.what();
    }
    EXPECT_EQ(subgraphs, 0) << "build_jit_pass ran";
  }
  EXPECT_THROW(CreateDumpDir(""), Error);
  EXPECT_NO_THROW(CreateDumpDir(dir_ + "/fresh/dir"));
  struct stat st;
  EXPECT_EQ(::stat((dir_ + "/fresh/dir").c_str(), &st), 0);
}

}  // namespace
}  // namespace kiln
