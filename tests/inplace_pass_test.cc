// inplace_pass: goldens for where it fires and where it must not (input read
// later, gelu_grad reading X, persistable, fed or fetched, shapes, versions),
// numeric parity with the pass on and off for every candidate op on both
// kernel sets, and training with the pass on and off (the grads that read a
// forward output see the right values), also after build_jit_pass.
#include "passes/inplace_pass.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "framework/data/digits.h"
#include "framework/data/synthetic.h"
#include "framework/error.h"
#include "framework/executor.h"
#include "framework/file_util.h"
#include "framework/jit_subgraph.h"
#include "framework/models/models.h"
#include "framework/onednn/onednn_kernels.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/trainer.h"
#include "framework/validate.h"
#include "passes/pass_registry.h"
#include "tests/golden_util.h"
#include "tests/op_test_util.h"
#include "tests/program_maker.h"
#include "tests/test_jit.h"
#include "tests/train_cases.h"

namespace kiln {
namespace {

using ir::Graph;

// ---- Helpers -----------------------------------------------------------------

using test::ProgramMaker;

OpBuilder Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out});
}
OpBuilder Scale(const std::string& x, const std::string& out, float s = 1.0f) {
  return Unary("scale", x, out).Attr("scale", s);
}
// x * x: a producer that is not an in-place candidate.
OpBuilder Square(const std::string& x, const std::string& out) {
  return OpBuilder("elementwise_mul").In("X", {x}).In("Y", {x}).Out("Out", {out});
}
OpBuilder Add(const std::string& x, const std::string& y, const std::string& out) {
  return OpBuilder("elementwise_add").In("X", {x}).In("Y", {y}).Out("Out", {out});
}

std::string Join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

proto::ProgramDesc Apply(const proto::ProgramDesc& program, const std::set<std::string>& keep,
                         InplaceReport* report = nullptr) {
  InplacePassOptions o;
  o.keep_vars = keep;
  Graph graph = Graph::FromBlock(program.blocks(0));
  InplacePass(o).Run(graph, report);
  graph.Verify();
  proto::ProgramDesc out = program;
  *out.mutable_blocks(0) = graph.ToBlock();
  return out;
}

size_t CountRenamed(const InplaceReport& r, const std::string& type) {
  size_t n = 0;
  for (const auto& x : r.renamed) n += x.type == type;
  return n;
}
const InplaceReport::Skipped* FindSkipped(const InplaceReport& r, const std::string& type) {
  for (const auto& s : r.skipped) {
    if (s.type == type) return &s;
  }
  return nullptr;
}

// ---- Goldens -------------------------------------------------------------------

std::string GoldenDir() { return std::string(KILN_SOURCE_DIR) + "/tests/golden/inplace_pass/"; }
// Runs the pass on block 0 and renders: options, the graph before and after,
// and the report. The input program lives beside the golden; the builder must
// still produce it.
InplaceReport CheckGolden(const std::string& name, const proto::ProgramDesc& built, const std::set<std::string>& keep,
                          bool expect_change) {
  const std::string input_path = GoldenDir() + name + ".pbtxt";
  const std::string golden_path = GoldenDir() + name + ".golden";
  if (test::UpdateGolden()) WriteFileAtomic(input_path, ProgramToText(built));
  const proto::ProgramDesc program = LoadProgram(input_path);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(program, built))
      << input_path << " differs from the test's builder; regenerate with KILN_UPDATE_GOLDEN=1";
  ValidateProgram(program);

  InplacePassOptions o;
  o.keep_vars = keep;
  InplaceReport report;
  Graph graph = Graph::FromBlock(program.blocks(0));
  const std::string before = graph.Print();
  const bool changed = InplacePass(o, &report).Run(graph);
  graph.Verify();
  EXPECT_EQ(changed, expect_change) << name;
  proto::ProgramDesc after = program;
  *after.mutable_blocks(0) = graph.ToBlock();
  ValidateProgram(after);

  std::string t = "# " + name + ": inplace_pass golden (regenerate with KILN_UPDATE_GOLDEN=1)\n";
  t += "# options: keep_vars=[" + Join(keep) + "] op_types=OneDnnInplaceOps()\n";
  t += "## before\n" + before;
  t += std::string("## after: ") + (changed ? "changed" : "unchanged") + "\n" + graph.Print();
  t += "## report\n" + report.ToString();
  test::ExpectGolden(golden_path, t);
  return report;
}

// matmul -> bias add -> relu -> scale (fetched): the add and the relu collapse
// onto the matmul's output; the scale's output is fetched.
TEST(InplacePassGolden, ChainCollapsesOntoOneVar) {
  ProgramMaker p;
  p.Var("x", {-1, 4}).Param("w", {4, 8}).Param("b", {8}).Var("m", {-1, 8}).Var("h", {-1, 8});
  p.Var("r", {-1, 8}).Var("s", {-1, 8});
  p.Op(OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"m"}));
  p.Op(Add("m", "b", "h")).Op(Unary("relu", "h", "r")).Op(Scale("r", "s", 2.0f));
  const InplaceReport r = CheckGolden("chain", p.program, {"x", "s"}, true);
  ASSERT_EQ(r.renamed.size(), 2u);
  EXPECT_EQ(r.renamed[0].output, "h");
  EXPECT_EQ(r.renamed[1].input, "m");
  EXPECT_EQ(r.renamed[1].output, "r");
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_EQ(r.skipped[0].reason, InplaceSkip::kKept);
  EXPECT_EQ(r.SavedBytes(16), 2u * 16 * 8 * 4);
}

// relu_grad reads relu's Out, which is now X's var: relu still runs in place.
TEST(InplacePassGolden, ReluGradReadsTheRenamedOut) {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("h", {4, 8}).Var("r", {4, 8}).Var("r@GRAD", {4, 8}).Var("h@GRAD", {4, 8});
  p.Op(Scale("x", "h")).Op(Unary("relu", "h", "r"));
  p.Op(OpBuilder("relu_grad").In("Out", {"r"}).In("Out@GRAD", {"r@GRAD"}).Out("X@GRAD", {"h@GRAD"}));
  const InplaceReport r = CheckGolden("relu_grad_reads_out", p.program, {"x", "r@GRAD", "h@GRAD"}, true);
  EXPECT_EQ(CountRenamed(r, "relu"), 1u);
}

// gelu_grad reads gelu's X: X is read later, so gelu must not overwrite it.
TEST(InplacePassGolden, GeluGradReadsXSoGeluDoesNotFire) {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("h", {4, 8}).Var("g", {4, 8}).Var("g@GRAD", {4, 8}).Var("h@GRAD", {4, 8});
  p.Op(Scale("x", "h")).Op(Unary("gelu", "h", "g"));
  p.Op(OpBuilder("gelu_grad").In("X", {"h"}).In("Out@GRAD", {"g@GRAD"}).Out("X@GRAD", {"h@GRAD"}));
  const InplaceReport r = CheckGolden("gelu_grad_reads_x", p.program, {"x", "g@GRAD", "h@GRAD"}, false);
  ASSERT_NE(FindSkipped(r, "gelu"), nullptr);
  EXPECT_EQ(FindSkipped(r, "gelu")->reason, InplaceSkip::kReadLater);
}

// relu's input is read again by the add: relu stays out of place; the add
// (whose X dies there) runs in place.
TEST(InplacePassGolden, InputReadLater) {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("h", {4, 8}).Var("r", {4, 8}).Var("o", {4, 8}).Var("res", {4, 8});
  p.Op(Scale("x", "h")).Op(Unary("relu", "h", "r")).Op(Add("r", "h", "o")).Op(Scale("o", "res"));
  const InplaceReport r = CheckGolden("input_read_later", p.program, {"x", "res"}, true);
  ASSERT_NE(FindSkipped(r, "relu"), nullptr);
  EXPECT_EQ(FindSkipped(r, "relu")->reason, InplaceSkip::kReadLater);
  EXPECT_EQ(CountRenamed(r, "elementwise_add"), 1u);
}

// Persistable input or output, fed input, fetched output, an input nobody
// writes: nothing fires.
TEST(InplacePassGolden, PersistableFedFetchedAndUnwrittenDoNotFire) {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("u", {4, 8}).Param("p", {4, 8}).Param("q", {4, 8});
  p.Var("h", {4, 8}).Var("a", {4, 8}).Var("c", {4, 8}).Var("d", {4, 8}).Var("e", {4, 8}).Var("f", {4, 8});
  p.Op(OpBuilder("fill_constant").Out("Out", {"p"}).Attr("shape", std::vector<int64_t>{4, 8}).Attr("value", 1.0f));
  p.Op(Unary("relu", "p", "a"));   // X persistable
  p.Op(Square("a", "h"));
  p.Op(Unary("tanh", "h", "q"));   // Out persistable
  p.Op(Unary("sigmoid", "x", "c"));  // X fed
  p.Op(Square("c", "d"));
  p.Op(Unary("exp", "d", "e"));    // Out fetched
  p.Op(Unary("relu", "u", "f"));   // X written by no op
  const InplaceReport r = CheckGolden("not_fired", p.program, {"x", "e"}, false);
  EXPECT_TRUE(r.renamed.empty());
  std::multiset<InplaceSkip> reasons;
  for (const auto& s : r.skipped) reasons.insert(s.reason);
  EXPECT_EQ(reasons.count(InplaceSkip::kPersistable), 2u);
  EXPECT_EQ(reasons.count(InplaceSkip::kKept), 2u);
  EXPECT_EQ(reasons.count(InplaceSkip::kNotWritten), 1u);
}

// A broadcast add runs in place over X (the full-size side), never over Y;
// declared dims that differ (a [-1,8] input, a [4,8] output) stop it.
TEST(InplacePassGolden, BroadcastAndShapeChange) {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("bx", {8}).Var("h", {4, 8}).Var("b", {8}).Var("o", {4, 8}).Var("res", {4, 8});
  p.Var("y", {-1, 8}).Var("k", {-1, 8}).Var("z", {4, 8}).Var("res2", {4, 8});
  p.Op(Scale("x", "h")).Op(Scale("bx", "b")).Op(Add("h", "b", "o")).Op(Scale("o", "res"));
  p.Op(Scale("y", "k")).Op(Unary("relu", "k", "z")).Op(Scale("z", "res2"));
  const InplaceReport r = CheckGolden("broadcast_and_shape", p.program, {"x", "bx", "y", "res", "res2"}, true);
  ASSERT_EQ(CountRenamed(r, "elementwise_add"), 1u);
  EXPECT_EQ(r.renamed[0].input, "h");
  ASSERT_NE(FindSkipped(r, "relu"), nullptr);
  EXPECT_EQ(FindSkipped(r, "relu")->reason, InplaceSkip::kShapeMismatch);
}

// X's name written again later, Out's name written by two ops.
TEST(InplacePassGolden, VersionedNamesDoNotFire) {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("h", {4, 8}).Var("r", {4, 8}).Var("g", {4, 8}).Var("t", {4, 8});
  p.Op(Square("x", "h")).Op(Unary("relu", "h", "r")).Op(Square("r", "h"));
  p.Op(Square("x", "g")).Op(Unary("tanh", "g", "t")).Op(Square("x", "t"));
  const InplaceReport r = CheckGolden("versions", p.program, {"x"}, false);
  ASSERT_NE(FindSkipped(r, "relu"), nullptr);
  EXPECT_EQ(FindSkipped(r, "relu")->reason, InplaceSkip::kRewritten);
  ASSERT_NE(FindSkipped(r, "tanh"), nullptr);
  EXPECT_EQ(FindSkipped(r, "tanh")->reason, InplaceSkip::kOutputVersions);
}

// The MLP's training program: the bias adds and relus of the forward, the
// grad accumulation sums of the backward.
TEST(InplacePassGolden, MlpTrain) {
  const Model m = BuildMlp(MlpConfig{}, TrainConfig{});
  const InplaceReport r = CheckGolden("mlp_train", m.train, {m.features, m.labels, m.loss}, true);
  EXPECT_GE(CountRenamed(r, "relu"), 1u);
  EXPECT_GE(CountRenamed(r, "elementwise_add"), 1u);
}

TEST(InplacePassGolden, TransformerTrain) {
  const Model m = BuildTransformer(TransformerConfig{}, TrainConfig{});
  const InplaceReport r = CheckGolden("transformer_train", m.train, {m.features, m.labels, m.loss}, true);
  EXPECT_EQ(CountRenamed(r, "gelu"), 0u);  // gelu_grad reads X
  EXPECT_GE(CountRenamed(r, "softmax"), 1u);
  EXPECT_GE(CountRenamed(r, "sum"), 1u);
}

// After build_jit_pass only the framework ops outside clusters are left.
TEST(InplacePassGolden, MlpTrainAfterBuildJitPass) {
  const Model m = BuildMlp(MlpConfig{}, TrainConfig{});
  const std::set<std::string> keep = {m.features, m.labels, m.loss};
  BuildJitPassOptions jo;
  jo.keep_vars = keep;
  Graph graph = Graph::FromBlock(m.train.blocks(0));
  BuildJitPass(jo, [](const JitSubgraph& sg) { return JitSubgraphFingerprint(sg); }).Run(graph);
  proto::ProgramDesc clustered = m.train;
  *clustered.mutable_blocks(0) = graph.ToBlock();
  // jit_launch is not registered here: print only, no validation.
  const std::string golden_path = GoldenDir() + "mlp_train_after_jit.golden";
  InplaceReport report;
  InplacePassOptions o;
  o.keep_vars = keep;
  const std::string before = graph.Print();
  const bool changed = InplacePass(o, &report).Run(graph);
  graph.Verify();
  std::string t = "# mlp_train_after_jit: build_jit_pass, then inplace_pass (regenerate with KILN_UPDATE_GOLDEN=1)\n";
  t += "## before (after build_jit_pass)\n" + before;
  t += std::string("## after: ") + (changed ? "changed" : "unchanged") + "\n" + graph.Print();
  t += "## report\n" + report.ToString();
  test::ExpectGolden(golden_path, t);
}

// ---- Options and registry ------------------------------------------------------------

TEST(InplacePass, OnlyListedTypesAndUnknownTypesThrow) {
  EXPECT_THROW(InplacePass(InplacePassOptions{{}, {"no_such_op"}}), Error);
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("h", {4, 8}).Var("r", {4, 8}).Var("t", {4, 8}).Var("res", {4, 8});
  p.Op(Scale("x", "h")).Op(Unary("relu", "h", "r")).Op(Unary("tanh", "r", "t")).Op(Scale("t", "res"));
  InplaceReport report;
  Graph graph = Graph::FromBlock(p.program.blocks(0));
  EXPECT_TRUE(InplacePass(InplacePassOptions{{"x", "res"}, {"tanh"}}).Run(graph, &report));
  ASSERT_EQ(report.renamed.size(), 1u);
  EXPECT_EQ(report.renamed[0].type, "tanh");
  // elementwise_sub has an in-place pair but is not on the oneDNN list.
  const auto& list = OneDnnInplaceOps();
  EXPECT_EQ(std::count(list.begin(), list.end(), "elementwise_sub"), 0);
  for (const auto& t : list) {
    ASSERT_NE(OpRegistry::Global().Find(t), nullptr) << t;
    EXPECT_FALSE(OpRegistry::Global().Get(t).inplace.empty()) << t;
  }
}

TEST(InplacePass, RegisteredAndCreatedByName) {
  PassConfig config;
  config.inplace.keep_vars = {"x"};
  InplaceReport report;
  config.inplace_report = &report;
  auto pass = PassRegistry::Global().Create("inplace_pass", config);
  EXPECT_EQ(pass->name(), "inplace_pass");
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("h", {4, 8}).Var("r", {4, 8});
  p.Op(Scale("x", "h")).Op(Unary("relu", "h", "r"));
  Graph graph = Graph::FromBlock(p.program.blocks(0));
  EXPECT_TRUE(RunPasses(graph, {pass.get()}));
  EXPECT_EQ(report.renamed.size(), 1u);
}

// ---- Numeric parity ----------------------------------------------------------------

// Runs `program` (feeds by name) and returns a copy of `fetch`.
Tensor RunAndFetch(const proto::ProgramDesc& program, const std::map<std::string, Tensor>& feeds,
                   const std::string& fetch, bool use_onednn) {
  Executor exec(ExecutorOptions{use_onednn, false, true});
  auto plan = exec.Prepare(program, 0, {fetch});
  Scope scope;
  for (const auto& [name, t] : feeds) FeedTensor(program.blocks(0), scope, name, t);
  exec.Run(*plan, scope);
  Tensor out;
  out.CopyFrom(scope.GetVar(fetch)->Get());
  return out;
}

// For every candidate op: a producer, the op, a consumer. With the pass the
// op reads and writes one var; results equal to the bit on the reference and
// the oneDNN kernels, and the oneDNN kernel (not a fallback) ran in place.
TEST(InplacePassNumeric, EveryCandidateOpGivesTheSameResult) {
  std::mt19937 rng(11);
  const Dims dims = {6, 37};
  struct Case {
    std::string name;
    OpBuilder op;
  };
  std::vector<Case> cases;
  for (const std::string t : {"relu", "tanh", "sigmoid", "exp", "softmax"}) cases.push_back({t, Unary(t, "x", "out")});
  cases.push_back({"gelu", Unary("gelu", "x", "out")});
  cases.push_back({"gelu approximate", Unary("gelu", "x", "out").Attr("approximate", true)});
  cases.push_back({"scale", Unary("scale", "x", "out").Attr("scale", 0.5f).Attr("bias", 0.25f)});
  cases.push_back({"elementwise_add broadcast", Add("x", "b", "out")});
  cases.push_back({"elementwise_add same shape", Add("x", "y", "out")});
  cases.push_back({"sum", OpBuilder("sum").In("X", {"x", "y", "y"}).Out("Out", {"out"})});
  std::set<std::string> covered;
  for (const Case& c : cases) {
    ProgramMaker p;
    p.Var("a", dims).Var("a2", dims).Var("bb", {dims[1]}).Var("x", dims).Var("y", dims).Var("b", {dims[1]});
    p.Var("out", dims).Var("res", dims);
    p.Op(Scale("a", "x", 1.5f)).Op(Scale("a2", "y", 1.0f)).Op(Scale("bb", "b", 1.0f)).Op(c.op).Op(Scale("out", "res", 2.0f));
    const std::set<std::string> keep = {"a", "a2", "bb", "res"};
    InplaceReport report;
    const proto::ProgramDesc inplace = Apply(p.program, keep, &report);
    const std::string type = c.op.Build().type();
    ASSERT_EQ(CountRenamed(report, type), 1u) << c.name << "\n" << report.ToString();
    ValidateProgram(inplace);
    covered.insert(type);
    const std::map<std::string, Tensor> feeds = {{"a", test::RandomTensor(dims, DataType::kFP32, rng, -3, 3)},
                                                  {"a2", test::RandomTensor(dims, DataType::kFP32, rng, -3, 3)},
                                                  {"bb", test::RandomTensor({dims[1]}, DataType::kFP32, rng)}};
    for (bool onednn : {false, true}) {
      const int64_t runs_before = OneDnnKernelRuns(type);
      const Tensor want = RunAndFetch(p.program, feeds, "res", onednn);
      const int64_t runs_mid = OneDnnKernelRuns(type);
      const Tensor got = RunAndFetch(inplace, feeds, "res", onednn);
      EXPECT_EQ(test::CompareTensors(got, want, 0, 0), "") << c.name << (onednn ? " oneDNN" : " reference");
      if (onednn) {
        EXPECT_GT(runs_mid - runs_before, 0) << c.name << ": no oneDNN kernel ran";
        EXPECT_EQ(OneDnnKernelRuns(type) - runs_mid, runs_mid - runs_before)
            << c.name << ": the oneDNN kernel fell back when run in place";
      }
    }
  }
  for (const auto& t : OneDnnInplaceOps()) EXPECT_EQ(covered.count(t), 1u) << t << " has no parity case";
}

// ---- Training with the pass on and off ---------------------------------------------------

using TrainCase = test::TrainCase;

std::vector<TrainCase> Models() { return test::SmallTrainCases(); }

// Same losses to the bit: relu_grad/softmax_grad read the renamed Out, the
// sums accumulate into their first input, nothing read later was overwritten.
TEST(InplacePassTrain, LossesMatchWithThePassOff) {
  for (const TrainCase& c : Models()) {
    for (bool onednn : {true, false}) {
      TrainOptions o;
      o.epochs = 100;
      o.batch_size = 16;
      o.max_steps = 12;
      o.exec.use_onednn = onednn;
      const TrainResult off = Train(c.model, c.train, c.test, o);
      InplaceReport report;
      o.program_transform = [&](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
        return Apply(p, keep, keep.count(c.model.loss) ? &report : nullptr);
      };
      const TrainResult on = Train(c.model, c.train, c.test, o);
      EXPECT_FALSE(report.renamed.empty()) << c.name;
      ASSERT_EQ(on.losses.size(), off.losses.size());
      for (size_t i = 0; i < on.losses.size(); ++i) {
        EXPECT_EQ(on.losses[i], off.losses[i]) << c.name << (onednn ? " oneDNN" : " reference") << " step " << i;
      }
      EXPECT_EQ(on.test_accuracy, off.test_accuracy) << c.name;
    }
  }
}

// The production pipeline: build_jit_pass, then inplace_pass on what is left.
TEST(InplacePassTrain, AfterBuildJitPassLossesMatch) {
  for (const TrainCase& c : Models()) {
    test::TestJit jit;
    TrainOptions o;
    o.epochs = 100;
    o.batch_size = 16;
    o.max_steps = 12;
    const TrainResult off = Train(c.model, c.train, c.test, o);
    o.registry = &jit.registry();
    o.program_transform = [&jit](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
      PipelineOptions po = jit.Pipeline(BuildJitPassOptions{});
      po.inplace = true;
      po.keep_vars = keep;
      return RunPipeline(p, po, jit.registry());
    };
    const TrainResult on = Train(c.model, c.train, c.test, o);
    EXPECT_GT(jit->stats().compiles, 0) << c.name;
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t i = 0; i < on.losses.size(); ++i) {
      EXPECT_NEAR(on.losses[i], off.losses[i], 1e-4 * std::max(1.0f, std::fabs(off.losses[i])))
          << c.name << " step " << i;
    }
  }
}

}  // namespace
}  // namespace kiln
