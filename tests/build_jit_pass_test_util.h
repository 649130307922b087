// Helpers of the build_jit_pass tests (build_jit_pass_test,
// build_jit_pass_behaviour_test): a recording subgraph sink, a symbolic run
// that says whether two programs compute the same values, the golden check,
// and the small programs they cluster.
#pragma once

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
namespace build_jit_pass_test {

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

inline OpBuilder Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out});
}
inline OpBuilder Binary(const std::string& type, const std::string& x, const std::string& y, const std::string& out) {
  return OpBuilder(type).In("X", {x}).In("Y", {y}).Out("Out", {out});
}
inline OpBuilder CrossEntropy(const std::string& logits, const std::string& label, const std::string& softmax,
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
inline const std::vector<std::string> kStandIns = {"softmax_with_cross_entropy", "fill_constant"};

inline std::string Join(const std::vector<std::string>& items) {
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

inline void ExpectSameSemantics(const proto::BlockDesc& before, const proto::BlockDesc& after,
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

inline std::string GoldenDir() { return std::string(KILN_SOURCE_DIR) + "/tests/golden/build_jit_pass/"; }
inline std::string DescribeOptions(const BuildJitPassOptions& o) {
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

inline std::unique_ptr<PassResult> RunPass(const proto::ProgramDesc& program, const BuildJitPassOptions& options,
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
inline std::unique_ptr<PassResult> CheckGolden(const std::string& name, const proto::ProgramDesc& built,
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

inline std::vector<std::string> Types(const proto::BlockDesc& block) {
  std::vector<std::string> out;
  for (const auto& op : block.ops()) out.push_back(op.type());
  return out;
}

// ---- Programs --------------------------------------------------------------------

inline Model SmallMlp(OptimizerKind optimizer) {
  MlpConfig config;
  config.input = 8;
  config.hidden = {16};
  config.classes = 4;
  TrainConfig train;
  train.optimizer = optimizer;
  return BuildMlp(config, train);
}

inline BuildJitPassOptions MlpOptions(const Model& m) {
  BuildJitPassOptions o;
  o.keep_vars = {m.features, m.labels, m.loss};
  return o;
}

// a = relu(x); (sm, loss) = softmax_with_cross_entropy(a, label); c = exp(a);
// d = sm + c. Merging {relu, exp} with the add would put the non-candidate on
// a cycle through the cluster.
inline proto::ProgramDesc DiamondProgram() {
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
inline proto::ProgramDesc WarCycleProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("a", {4, 8}).Var("b", {4, 8}).Var("c", {4, 8});
  p.Op(Unary("relu", "x", "a"));
  p.Op(OpBuilder("fill_constant").Out("Out", {"x"}).Attr("shape", std::vector<int64_t>{4, 8}).Attr("value", 1.0f));
  p.Op(Unary("exp", "x", "b"));
  p.Op(Binary("elementwise_add", "a", "b", "c"));
  return p.program;
}

// relu -> exp -> tanh -> elementwise_add(., x): all candidates.
inline proto::ProgramDesc ChainProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("a", {4, 8}).Var("b", {4, 8}).Var("c", {4, 8}).Var("d", {4, 8});
  p.Op(Unary("relu", "x", "a"));
  p.Op(Unary("exp", "a", "b"));
  p.Op(Unary("tanh", "b", "c"));
  p.Op(Binary("elementwise_add", "c", "x", "d"));
  return p.program;
}

// One candidate between non-candidates.
inline proto::ProgramDesc LoneCandidateProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("label", {4, 1}, proto::INT64).Var("a", {4, 8}).Var("sm", {4, 8}).Var("loss", {4, 1});
  p.Op(Unary("relu", "x", "a"));
  p.Op(CrossEntropy("a", "label", "sm", "loss"));
  return p.program;
}

inline proto::ProgramDesc NoCandidateProgram() {
  ProgramMaker p;
  p.Var("x", {4, 8}).Var("label", {4, 1}, proto::INT64).Var("sm", {4, 8}).Var("loss", {4, 1});
  p.Op(OpBuilder("fill_constant").Out("Out", {"x"}).Attr("shape", std::vector<int64_t>{4, 8}));
  p.Op(CrossEntropy("x", "label", "sm", "loss"));
  return p.program;
}

// Two updates with nothing between them but a non-lowerable op:
// ua = relu(a); the loss of x; ub = relu(b). No data edge joins the relus.
inline proto::ProgramDesc LoneOpsProgram() {
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
inline proto::ProgramDesc LoneOpsApartProgram() {
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
inline proto::ProgramDesc FetchPersistableProgram() {
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

}  // namespace build_jit_pass_test
}  // namespace kiln
