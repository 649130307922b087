// ForTestProgram (framework/checkpoint/inference.h), Paddle's
// clone(for_test=True): a training program (forward, append_backward,
// optimizer) comes back as its forward ops in order with is_test set; run
// after the startup program it leaves every persistable var (parameters,
// optimizer state, batch_norm running statistics, the dropout state) bit for
// bit as it was, and computes the training program's forward outputs. An
// optimizer op without op_role is an error naming it; a forward-only program
// comes back with only is_test changed.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "framework/backward.h"
#include "framework/checkpoint/inference.h"
#include "framework/executor.h"
#include "framework/models/models.h"
#include "framework/op_desc.h"
#include "framework/operator.h"
#include "framework/optimizer_builder.h"
#include "framework/program_builder.h"
#include "framework/program_io.h"
#include "framework/validate.h"
#include "tests/memory_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::BitDiff;
using test::Copy;

// fc -> batch_norm (running statistics updated in place) -> relu -> dropout
// (its state advanced in place) -> fc -> softmax_with_cross_entropy -> mean,
// then append_backward and adam. `roles`: false leaves the update ops without
// op_role, as a program built before kiln marked roles.
struct Net {
  proto::ProgramDesc startup, forward, train;
  std::string probs, loss;
};

std::string Fc(ProgramBuilder& b, const std::string& x, int64_t in, int64_t out, const std::string& name) {
  const std::string w = b.Param(name + ".w", {in, out}, Init::XavierUniform(in, out));
  const std::string bias = b.Param(name + ".b", {out}, Init::Constant(0.1f));
  return b.Op1("elementwise_add", {{"X", {b.Op1("matmul", {{"X", {x}}, {"Y", {w}}})}}, {"Y", {bias}}});
}

void DeclareDropoutState(ProgramBuilder& b) {
  for (proto::ProgramDesc* p : {&b.main(), &b.startup()}) {
    proto::VarDesc* v = p->mutable_blocks(0)->add_vars();
    v->set_name("drop.state");
    v->set_dtype(proto::INT64);
    v->add_dims(1);
    v->set_persistable(true);
  }
  *b.startup().mutable_blocks(0)->add_ops() = OpBuilder("fill_constant")
                                                  .Out("Out", {"drop.state"})
                                                  .Attr("shape", std::vector<int64_t>{1})
                                                  .Attr("value", 5.0f)
                                                  .Attr("dtype", static_cast<int64_t>(DataType::kINT64))
                                                  .Build();
}

Net BatchNormDropoutNet() {
  Net n;
  ProgramBuilder b(7);
  const std::string x = b.Data("x", {-1, 6});
  const std::string labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  const std::string h = Fc(b, x, 6, 8, "fc0");
  const std::string scale = b.Param("bn.scale", {8}, Init::Uniform(0.5f));
  const std::string bias = b.Param("bn.bias", {8}, Init::Uniform(0.5f));
  const std::string mean = b.Persistable("bn.mean", {8}, 0.1f);
  const std::string var = b.Persistable("bn.var", {8}, 0.9f);
  b.RawOp(OpBuilder("batch_norm")
              .In("X", {h}).In("Scale", {scale}).In("Bias", {bias}).In("Mean", {mean}).In("Variance", {var})
              .Out("Y", {"bn.y"}).Out("MeanOut", {mean}).Out("VarianceOut", {var})
              .Out("SavedMean", {"bn.saved_mean"}).Out("SavedVariance", {"bn.saved_var"})
              .Build());
  DeclareDropoutState(b);
  b.RawOp(OpBuilder("dropout")
              .In("X", {b.Op1("relu", {{"X", {"bn.y"}}})}).In("Seed", {"drop.state"})
              .Out("Out", {"drop.out"}).Out("Mask", {"drop.mask"}).Out("SeedOut", {"drop.state"})
              .Attr("dropout_prob", 0.3f)
              .Build());
  const std::string logits = Fc(b, "drop.out", 8, 3, "head");
  const auto outs =
      b.Op("softmax_with_cross_entropy", {{"Logits", {logits}}, {"Label", {labels}}}, {"Softmax", "Loss"});
  n.probs = outs[0];
  n.loss = b.Op1("mean", {{"X", {outs[1]}}});
  n.forward = b.main();
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  AppendOptimizer(b, AppendBackward(&b.main(), n.loss), c);
  n.train = b.main();
  n.startup = b.startup();
  return n;
}

std::map<std::string, Tensor> Batch(unsigned seed, int64_t rows, int64_t features, const std::string& x = "x",
                                    const std::string& y = "labels") {
  std::mt19937 rng(seed);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < rows; ++i) labels.push_back(static_cast<int64_t>(rng() % 3));
  return {{x, test::RandomTensor({rows, features}, DataType::kFP32, rng)}, {y, test::Int64Tensor({rows, 1}, labels)}};
}

// Runs `program` once over `scope` with `feeds`; returns copies of `fetches`.
std::vector<Tensor> RunOnce(const proto::ProgramDesc& program, Scope& scope, const std::map<std::string, Tensor>& feeds,
                            const std::vector<std::string>& fetches) {
  for (const auto& [name, t] : feeds) FeedTensor(program.blocks(0), scope, name, t);
  Executor exec;
  auto plan = exec.Prepare(program, 0, {fetches.begin(), fetches.end()});
  exec.Run(*plan, scope);
  std::vector<Tensor> out;
  for (const auto& f : fetches) out.push_back(Copy(scope.GetVar(f)->Get()));
  return out;
}

std::map<std::string, Tensor> Persistables(const proto::ProgramDesc& program, const Scope& scope) {
  std::map<std::string, Tensor> out;
  for (const auto& v : program.blocks(0).vars()) {
    if (v.persistable()) out[v.name()] = Copy(scope.GetVar(v.name())->Get());
  }
  return out;
}

std::set<std::string> OpTypes(const proto::ProgramDesc& p) {
  std::set<std::string> types;
  for (const auto& op : p.blocks(0).ops()) types.insert(op.type());
  return types;
}

// The MLP of framework/models with adam: the test program is the model's
// forward program op for op, and evaluating it changes no persistable var.
TEST(ForTestProgramTest, TheMlpsTestProgramIsItsForwardProgramAndChangesNoState) {
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kAdam;
  const Model m = BuildMlp(MlpConfig{6, {8}, 3}, tc);
  const proto::ProgramDesc test_program = ForTestProgram(m.train);
  ValidateProgram(test_program);
  ASSERT_EQ(test_program.blocks(0).ops_size(), m.forward.blocks(0).ops_size());
  for (int i = 0; i < test_program.blocks(0).ops_size(); ++i) {
    EXPECT_EQ(test_program.blocks(0).ops(i).SerializeAsString(), m.forward.blocks(0).ops(i).SerializeAsString()) << i;
  }
  // The vars only the backward and the updates touch are gone; the others stay.
  const proto::BlockDesc& b = test_program.blocks(0);
  for (const auto& v : m.train.blocks(0).vars()) {
    const std::string& name = v.name();
    const bool training_only = name.find("@GRAD") != std::string::npos || name == "learning_rate" ||
                               name.find(".moment") != std::string::npos || name.find("_pow") != std::string::npos;
    EXPECT_EQ(FindVarDesc(b, v.name()) == nullptr, training_only) << v.name();
  }

  const auto feeds = Batch(1, 5, 6, m.features, m.labels);
  Scope train_scope, test_scope;
  Executor().RunProgram(m.startup, train_scope);
  Executor().RunProgram(m.startup, test_scope);
  const std::map<std::string, Tensor> before = Persistables(m.train, test_scope);
  const auto want = RunOnce(m.train, train_scope, feeds, {m.probs, m.loss});
  const auto got = RunOnce(test_program, test_scope, feeds, {m.probs, m.loss});
  EXPECT_EQ(BitDiff(got[0], want[0]), "");
  EXPECT_EQ(BitDiff(got[1], want[1]), "");
  ASSERT_GT(before.size(), 6u);  // parameters, learning rate, moments, beta powers
  for (const auto& [name, t] : before) EXPECT_EQ(BitDiff(test_scope.GetVar(name)->Get(), t), "") << name;
  // The training step did move them: the comparison above can fail.
  EXPECT_NE(BitDiff(train_scope.GetVar(m.params[0])->Get(), before.at(m.params[0])), "");
}

// batch_norm and dropout switch to inference: running statistics and the
// dropout state stay as they were, and the outputs are the training
// program's outputs in inference mode (its forward part with is_test set).
TEST(ForTestProgramTest, BatchNormAndDropoutRunInInferenceModeAndKeepTheirState) {
  const Net n = BatchNormDropoutNet();
  const proto::ProgramDesc test_program = ForTestProgram(n.train);
  ValidateProgram(test_program);
  EXPECT_EQ(OpTypes(test_program), OpTypes(n.forward));
  for (const auto& op : test_program.blocks(0).ops()) {
    const bool has = op.type() == "batch_norm" || op.type() == "dropout";
    const proto::AttrDesc* is_test = FindAttr(op, "is_test");
    EXPECT_EQ(is_test != nullptr && is_test->b(), has) << op.type();
  }
  for (const auto& op : n.train.blocks(0).ops()) EXPECT_EQ(FindAttr(op, "is_test"), nullptr) << "input changed";

  proto::ProgramDesc train_eval = n.train;
  SetIsTest(&train_eval);
  Scope train_scope, test_scope;
  Executor().RunProgram(n.startup, train_scope);
  Executor().RunProgram(n.startup, test_scope);
  // One training step first, so the state is not the startup's.
  RunOnce(n.train, train_scope, Batch(2, 6, 6), {n.loss});
  RunOnce(n.train, test_scope, Batch(2, 6, 6), {n.loss});
  const std::map<std::string, Tensor> before = Persistables(n.train, test_scope);
  const auto feeds = Batch(3, 4, 6);
  const auto want = RunOnce(train_eval, train_scope, feeds, {n.probs, n.loss});
  for (int run = 0; run < 2; ++run) {
    const auto got = RunOnce(test_program, test_scope, feeds, {n.probs, n.loss});
    EXPECT_EQ(BitDiff(got[0], want[0]), "") << "run " << run;
    EXPECT_EQ(BitDiff(got[1], want[1]), "") << "run " << run;
  }
  for (const char* v : {"bn.mean", "bn.var", "drop.state", "fc0.w", "fc0.w.moment1"}) EXPECT_TRUE(before.count(v)) << v;
  for (const auto& [name, t] : before) EXPECT_EQ(BitDiff(test_scope.GetVar(name)->Get(), t), "") << name;
}

// Ops marked lr_sched or recompute go too; an unmarked op of another kind
// and a var no op touches stay.
TEST(ForTestProgramTest, EveryTrainingRoleIsDroppedAndNothingElse) {
  const Net n = BatchNormDropoutNet();
  proto::ProgramDesc p = n.train;
  proto::BlockDesc* b = p.mutable_blocks(0);
  auto add_var = [b](const std::string& name) {
    proto::VarDesc* v = b->add_vars();
    v->set_name(name);
    v->set_dtype(proto::FP32);
    v->add_dims(1);
  };
  for (const char* v : {"lr_next", "recomputed", "unused"}) add_var(v);
  proto::OpDesc sched = OpBuilder("scale").In("X", {"learning_rate"}).Out("Out", {"lr_next"}).Build();
  SetAttr(&sched, kOpRoleAttr, Attribute(std::string(kOpRoleLRSched)));
  proto::OpDesc recompute = OpBuilder("scale").In("X", {"learning_rate"}).Out("Out", {"recomputed"}).Build();
  SetAttr(&recompute, kOpRoleAttr, Attribute(std::string(kOpRoleRecompute)));
  *b->add_ops() = sched;
  *b->add_ops() = recompute;
  const proto::ProgramDesc t = ForTestProgram(p);
  EXPECT_EQ(OpTypes(t), OpTypes(n.forward));
  EXPECT_EQ(t.blocks(0).ops_size(), n.forward.blocks(0).ops_size());
  for (const char* gone : {"lr_next", "recomputed", "learning_rate"}) {
    EXPECT_EQ(FindVarDesc(t.blocks(0), gone), nullptr) << gone;
  }
  EXPECT_NE(FindVarDesc(t.blocks(0), "unused"), nullptr);
}

// A forward-only program: nothing to prune, only is_test changes.
TEST(ForTestProgramTest, AForwardProgramComesBackWithOnlyIsTestSet) {
  const Net n = BatchNormDropoutNet();
  proto::ProgramDesc want = n.forward;
  SetIsTest(&want);
  EXPECT_EQ(ForTestProgram(n.forward).SerializeAsString(), want.SerializeAsString());
  EXPECT_NE(want.SerializeAsString(), n.forward.SerializeAsString());
  const Model m = BuildMlp(MlpConfig{6, {8}, 3}, TrainConfig{});
  EXPECT_EQ(ForTestProgram(m.forward).SerializeAsString(), m.forward.SerializeAsString());
}

// An update without op_role (a program from before roles, or an optimizer
// appended by hand) cannot be told from the forward part: an error naming it.
TEST(ForTestProgramTest, AnOptimizerOpWithoutRoleIsAnErrorNamingIt) {
  ProgramBuilder b(1);
  const std::string x = b.Data("x", {2, 3});
  const std::string w = b.Param("w", {3, 2}, Init::Constant(0.5f));
  const std::string loss = b.Op1("mean", {{"X", {b.Op1("matmul", {{"X", {x}}, {"Y", {w}}})}}});
  const auto params = AppendBackward(&b.main(), loss);
  const std::string lr = b.Persistable("lr", {1}, 0.1f);
  const int sgd_at = b.main().blocks(0).ops_size();
  b.RawOp(OpBuilder("sgd")
              .In("Param", {w})
              .In("Grad", {params[0].second})
              .In("LearningRate", {lr})
              .Out("ParamOut", {w})
              .Build());
  const std::string e = test::ErrorOf([&] { ForTestProgram(b.main()); });
  EXPECT_NE(e.find("clone(for_test): op #" + std::to_string(sgd_at) + " 'sgd' updates parameters but has no op_role "
                   "'optimize'"),
            std::string::npos)
      << e;
  // The same update with its role is pruned.
  SetAttr(b.main().mutable_blocks(0)->mutable_ops(sgd_at), kOpRoleAttr, Attribute(std::string(kOpRoleOptimize)));
  EXPECT_EQ(ForTestProgram(b.main()).blocks(0).ops_size(), 2);
}

}  // namespace
}  // namespace kiln
