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

namespace kiln {
namespace {

using ir::Graph;
using ir::NodeId;

// ---- Helpers -----------------------------------------------------------------

// Stores every subgraph it is given; the key is the fingerprint.
struct RecordingSink {
  std::vector<JitSubgraph> subgraphs;
  std::vector<std::string> keys;
  SubgraphSink sink() {
    return [this](const JitSubgraph& s) {
      subgraphs.push_back(s);
      keys.push_back(JitSubgraphFingerprint(s));
      return keys.back();
    };
  }
};

using test::ProgramMaker;

OpBuilder Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out});
}
OpBuilder Binary(const std::string& type, const std::string& x, const std::string& y, const std::string& out) {
  return OpBuilder(type).In("X", {x}).In("Y", {y}).Out("Out", {out});
}
OpBuilder CrossEntropy(const std::string& logits, const std::string& label, const std::string& softmax,
                       const std::string& loss) {
  return OpBuilder("softmax_with_cross_entropy")
      .In("Logits", {logits})
      .In("Label", {label})
      .Out("Softmax", {softmax})
      .Out("Loss", {loss});
}

// softmax_with_cross_entropy and fill_constant are clustered (they run their
// framework kernels inside clusters). The small programs below use them as
// ops the JIT must not take, so their tests deny them.
const std::vector<std::string> kStandIns = {"softmax_with_cross_entropy", "fill_constant"};

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Symbolic execution: every value is the interned id of the expression that
// computed it (initial values are named after their var). With one interner
// shared by two runs, equal ids mean equal computations, so two programs
// agree iff every op (inside a cluster or not) sees the same inputs and the
// persistable and kept vars end with the same values.
using Interner = std::map<std::string, int>;

class SymbolicRun {
 public:
  explicit SymbolicRun(Interner* ids) : ids_(ids) {}

  // Runs the block in order; a jit_launch runs the subgraph stored under its
  // compilation_key on its own var namespace.
  void Run(const proto::BlockDesc& block, const std::map<std::string, JitSubgraph>& subgraphs) {
    for (const auto& op : block.ops()) {
      if (op.type() != "jit_launch") {
        Exec(op, &env_);
        continue;
      }
      const proto::AttrDesc* key = FindAttr(op, "compilation_key");
      ASSERT_NE(key, nullptr);
      auto it = subgraphs.find(key->s());
      ASSERT_NE(it, subgraphs.end()) << "no subgraph for key " << key->s();
      const JitSubgraph& sg = it->second;
      EXPECT_EQ(InputArgs(op, "X"), sg.inputs);
      EXPECT_EQ(OutputArgs(op, "Out"), sg.outputs);
      std::map<std::string, int> local;
      for (const auto& name : sg.inputs) local[name] = Value(&env_, name);
      for (const auto& sub_op : sg.block.ops()) Exec(sub_op, &local);
      for (const auto& name : sg.outputs) {
        ASSERT_EQ(local.count(name), 1u) << "output " << name << " never computed";
        env_[name] = local[name];
      }
    }
  }
  int Value(const std::string& name) { return Value(&env_, name); }
  const std::multiset<std::string>& trace() const { return trace_; }

 private:
  int Intern(const std::string& expr) { return ids_->emplace(expr, static_cast<int>(ids_->size())).first->second; }
  int Value(std::map<std::string, int>* env, const std::string& name) {
    auto it = env->find(name);
    if (it != env->end()) return it->second;
    return (*env)[name] = Intern("init " + name);
  }
  void Exec(const proto::OpDesc& op, std::map<std::string, int>* env) {
    std::string expr = op.type() + "(";
    for (const auto& slot : op.inputs()) {
      expr += slot.name() + ":";
      for (const auto& arg : slot.args()) {
        expr += arg == kEmptyVarName ? std::string("_") : "%" + std::to_string(Value(env, arg));
        expr += ",";
      }
      expr += ";";
    }
    expr += ")";
    trace_.insert(expr);
    for (const auto& slot : op.outputs()) {
      for (int i = 0; i < slot.args_size(); ++i) {
        if (slot.args(i) == kEmptyVarName) continue;
        (*env)[slot.args(i)] = Intern(expr + "." + slot.name() + std::to_string(i));
      }
    }
  }

  Interner* ids_;
  std::map<std::string, int> env_;
  std::multiset<std::string> trace_;
};

void ExpectSameSemantics(const proto::BlockDesc& before, const proto::BlockDesc& after,
                         const std::vector<JitSubgraph>& subgraphs, const std::set<std::string>& keep_vars) {
  std::map<std::string, JitSubgraph> by_key;
  for (const auto& sg : subgraphs) by_key[JitSubgraphFingerprint(sg)] = sg;
  Interner ids;
  SymbolicRun want(&ids), got(&ids);
  want.Run(before, {});
  got.Run(after, by_key);
  EXPECT_EQ(want.trace(), got.trace()) << "some op sees different inputs";
  std::set<std::string> observed = keep_vars;
  for (const auto& v : before.vars()) {
    if (v.persistable()) observed.insert(v.name());
  }
  for (const auto& name : observed) EXPECT_EQ(want.Value(name), got.Value(name)) << "final value of " << name;
}

// ---- Goldens -------------------------------------------------------------------

std::string GoldenDir() { return std::string(KILN_SOURCE_DIR) + "/tests/golden/build_jit_pass/"; }
std::string DescribeOptions(const BuildJitPassOptions& o) {
  return StrCat("# options: allow_ops=[", Join(o.allow_ops), "] deny_ops=[", Join(o.deny_ops),
                "] min_cluster_size=", o.min_cluster_size, " keep_vars=[",
                Join(std::vector<std::string>(o.keep_vars.begin(), o.keep_vars.end())), "]\n");
}

// Runs the pass on block 0 of the program and renders the golden text.
struct PassResult {
  bool changed = false;
  std::string text;
  BuildJitReport report;
  RecordingSink sink;
  proto::BlockDesc after;
};

std::unique_ptr<PassResult> RunPass(const proto::ProgramDesc& program, const BuildJitPassOptions& options,
                                    const std::string& name = "test") {
  auto r = std::make_unique<PassResult>();
  Graph graph = Graph::FromBlock(program.blocks(0));
  const std::string before = graph.Print();
  BuildJitPass pass(options, r->sink.sink(), &r->report);
  r->changed = pass.Run(graph);
  graph.Verify();
  r->after = graph.ToBlock();

  std::string& t = r->text;
  t += "# " + name + ": build_jit_pass golden (regenerate with KILN_UPDATE_GOLDEN=1)\n";
  t += DescribeOptions(options);
  t += "## before\n" + before;
  t += std::string("## after: ") + (r->changed ? "changed" : "unchanged") + "\n" + graph.Print();
  t += "## report\n" + r->report.ToString();
  for (size_t i = 0; i < r->sink.subgraphs.size(); ++i) {
    const JitSubgraph& sg = r->sink.subgraphs[i];
    t += StrCat("## subgraph ", i, " key=", r->sink.keys[i], " inputs=(", Join(sg.inputs), ") outputs=(",
                Join(sg.outputs), ")\n");
    t += Graph::FromBlock(sg.block).Print();
  }
  return r;
}

// Golden case: the input program lives beside its expected output so both
// can be read in review; the builder must still produce the checked-in input.
std::unique_ptr<PassResult> CheckGolden(const std::string& name, const proto::ProgramDesc& built,
                                        const BuildJitPassOptions& options) {
  const std::string input_path = GoldenDir() + name + ".pbtxt";
  const std::string golden_path = GoldenDir() + name + ".golden";
  if (test::UpdateGolden()) WriteFileAtomic(input_path, ProgramToText(built));
  const proto::ProgramDesc program = LoadProgram(input_path);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(program, built))
      << input_path << " differs from the test's builder; regenerate with KILN_UPDATE_GOLDEN=1";
  ValidateProgram(program);

  auto r = RunPass(program, options, name);
  test::ExpectGolden(golden_path, r->text);
  ExpectSameSemantics(program.blocks(0), r->after, r->sink.subgraphs, options.keep_vars);
  return r;
}

std::vector<std::string> Types(const proto::BlockDesc& block) {
  std::vector<std::string> out;
  for (const auto& op : block.ops()) out.push_back(op.type());
  return out;
}

// ---- Programs --------------------------------------------------------------------

Model SmallMlp(OptimizerKind optimizer) {
  MlpConfig config;
  config.input = 8;
  config.hidden = {16};
  config.classes = 4;
  TrainConfig train;
  train.optimizer = optimizer;
  return BuildMlp(config, train);
}

BuildJitPassOptions MlpOptions(const Model& m) {
  BuildJitPassOptions o;
  o.keep_vars = {m.features, m.labels, m.loss};
  return o;
}

// a = relu(x); (sm, loss) = softmax_with_cross_entropy(a, label); c = exp(a);
// d = sm + c. Merging {relu, exp} with the add would put the non-candidate on
// a cycle through the cluster.
proto::ProgramDesc DiamondProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("label", {4, 1}, proto::INT64);
  p.Var("a", {4, 8}).Var("sm", {4, 8}).Var("loss", {4, 1}).Var("c", {4, 8}).Var("d", {4, 8});
  p.Op(Unary("relu", "x", "a"));
  p.Op(CrossEntropy("a", "label", "sm", "loss"));
  p.Op(Unary("exp", "a", "c"));
  p.Op(Binary("elementwise_add", "sm", "c", "d"));
  return p.program;
}

// a = relu(x); x = fill_constant(); b = exp(x); c = a + b: the only path
// from relu to the add besides the data edge is the write-after-read order
// on x through the (non-candidate) fill_constant.
proto::ProgramDesc WarCycleProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("a", {4, 8}).Var("b", {4, 8}).Var("c", {4, 8});
  p.Op(Unary("relu", "x", "a"));
  p.Op(OpBuilder("fill_constant").Out("Out", {"x"}).Attr("shape", std::vector<int64_t>{4, 8}).Attr("value", 1.0f));
  p.Op(Unary("exp", "x", "b"));
  p.Op(Binary("elementwise_add", "a", "b", "c"));
  return p.program;
}

// relu -> exp -> tanh -> elementwise_add(., x): all candidates.
proto::ProgramDesc ChainProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("a", {4, 8}).Var("b", {4, 8}).Var("c", {4, 8}).Var("d", {4, 8});
  p.Op(Unary("relu", "x", "a"));
  p.Op(Unary("exp", "a", "b"));
  p.Op(Unary("tanh", "b", "c"));
  p.Op(Binary("elementwise_add", "c", "x", "d"));
  return p.program;
}

// One candidate between non-candidates.
proto::ProgramDesc LoneCandidateProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("label", {4, 1}, proto::INT64).Var("a", {4, 8}).Var("sm", {4, 8}).Var("loss", {4, 1});
  p.Op(Unary("relu", "x", "a"));
  p.Op(CrossEntropy("a", "label", "sm", "loss"));
  return p.program;
}

proto::ProgramDesc NoCandidateProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("label", {4, 1}, proto::INT64).Var("sm", {4, 8}).Var("loss", {4, 1});
  p.Op(OpBuilder("fill_constant").Out("Out", {"x"}).Attr("shape", std::vector<int64_t>{4, 8}));
  p.Op(CrossEntropy("x", "label", "sm", "loss"));
  return p.program;
}

// Two updates with nothing between them but a non-lowerable op:
// ua = relu(a); the loss of x; ub = relu(b). No data edge joins the relus.
proto::ProgramDesc LoneOpsProgram() {
  ProgramMaker p;
  p.Var("a", {4, 8}).Var("b", {4, 8}).Var("ua", {4, 8}).Var("ub", {4, 8});
  p.Var("x", {4, 8}).Var("label", {4, 1}, proto::INT64).Var("sm", {4, 8}).Var("loss", {4, 1});
  p.Op(Unary("relu", "a", "ua"));
  p.Op(CrossEntropy("x", "label", "sm", "loss"));
  p.Op(Unary("relu", "b", "ub"));
  return p.program;
}

// Lone ops that must stay apart: the second relu reads the loss made from
// the first (a path through a non-lowerable op), and exp is another type.
proto::ProgramDesc LoneOpsApartProgram() {
  ProgramMaker p;
  p.Var("a", {4, 8}).Var("ua", {4, 8}).Var("label", {4, 1}, proto::INT64).Var("sm", {4, 8});
  p.Var("loss", {4, 1}).Var("ul", {4, 1}).Var("b", {4, 8}).Var("eb", {4, 8});
  p.Op(Unary("relu", "a", "ua"));
  p.Op(CrossEntropy("ua", "label", "sm", "loss"));
  p.Op(Unary("relu", "loss", "ul"));
  p.Op(Unary("exp", "b", "eb"));
  return p.program;
}

// h = x @ w; a = relu(h); s = 2a (fetched); d = exp(a) (dead);
// g = x^T @ a; sgd(w, g, lr) in place; softmax_with_cross_entropy(h, label)
// reads h after the cluster. Outputs: h (read outside), s (kept), w
// (persistable, written in place); d, a and g stay inside.
proto::ProgramDesc FetchPersistableProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Param("w", {8, 8}).Param("lr", {1});
  p.Var("label", {4, 1}, proto::INT64);
  p.Var("h", {4, 8}).Var("a", {4, 8}).Var("s", {4, 8}).Var("d", {4, 8}).Var("g", {8, 8});
  p.Var("sm", {4, 8}).Var("loss", {4, 1});
  p.Op(Binary("matmul", "x", "w", "h"));
  p.Op(Unary("relu", "h", "a"));
  p.Op(Unary("scale", "a", "s").Attr("scale", 2.0f));
  p.Op(Unary("exp", "a", "d"));
  p.Op(Binary("matmul", "x", "a", "g").Attr("transpose_X", true));
  p.Op(OpBuilder("sgd").In("Param", {"w"}).In("Grad", {"g"}).In("LearningRate", {"lr"}).Out("ParamOut", {"w"}));
  p.Op(CrossEntropy("h", "label", "sm", "loss"));
  return p.program;
}

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
