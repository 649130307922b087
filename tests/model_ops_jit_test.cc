// batch_norm, lookup_table and dropout inside JIT clusters: small training
// programs (forward, append_backward, sgd) run with the JIT off and on, in
// both launch modes, give the same losses, parameters and state (running
// statistics, dropout state), and the new ops sit inside the clusters. Their
// inference forms (kiln export's pruning) are deterministic and leave the
// state alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "framework/backward.h"
#include "framework/checkpoint/inference.h"
#include "framework/program_builder.h"
#include "tests/jit_train_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::RandomTensor;

// A training program, its startup and one feed map per step.
using Net = test::TrainNet;

std::string Fc(ProgramBuilder& b, const std::string& x, int64_t in, int64_t out, const std::string& name) {
  const std::string w = b.Param(name + ".w", {in, out}, Init::XavierUniform(in, out));
  const std::string bias = b.Param(name + ".b", {out}, Init::Constant(0.1f));
  const std::string y = b.Op1("matmul", {{"X", {x}}, {"Y", {w}}});
  return b.Op1("elementwise_add", {{"X", {y}}, {"Y", {bias}}});
}

// batch_norm over channel count `c` with in-place running statistics; returns Y.
std::string BatchNorm(ProgramBuilder& b, const std::string& x, int64_t c, bool is_test, const std::string& name,
                      std::vector<std::string>* state) {
  const std::string scale = b.Param(name + ".scale", {c}, Init::Uniform(0.5f));
  const std::string bias = b.Param(name + ".bias", {c}, Init::Uniform(0.5f));
  const std::string mean = b.Persistable(name + ".mean", {c}, 0.1f);
  const std::string var = b.Persistable(name + ".var", {c}, 0.9f);
  b.RawOp(OpBuilder("batch_norm")
              .In("X", {x})
              .In("Scale", {scale})
              .In("Bias", {bias})
              .In("Mean", {mean})
              .In("Variance", {var})
              .Out("Y", {name + ".y"})
              .Out("MeanOut", {mean})
              .Out("VarianceOut", {var})
              .Out("SavedMean", {name + ".saved_mean"})
              .Out("SavedVariance", {name + ".saved_var"})
              .Attr("is_test", is_test)
              .Attr("momentum", 0.8f)
              .Build());
  state->insert(state->end(), {mean, var, scale, bias});
  return name + ".y";
}

// softmax_with_cross_entropy + mean, the backward and sgd on every parameter.
void FinishTraining(ProgramBuilder& b, Net& n, const std::string& logits, const std::string& labels) {
  const auto outs =
      b.Op("softmax_with_cross_entropy", {{"Logits", {logits}}, {"Label", {labels}}}, {"Softmax", "Loss"});
  n.loss = b.Op1("mean", {{"X", {outs[1]}}});
  const auto params = AppendBackward(&b.main(), n.loss);
  const std::string lr = b.Persistable("lr", {1}, 0.2f);
  for (const auto& [p, g] : params) {
    b.RawOp(OpBuilder("sgd").In("Param", {p}).In("Grad", {g}).In("LearningRate", {lr}).Out("ParamOut", {p}).Build());
    n.compared.push_back(p);
  }
  n.startup = b.startup();
  n.train = b.main();
}

Tensor Labels(int64_t batch, int64_t classes, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> pick(0, classes - 1);
  std::vector<int64_t> v(static_cast<size_t>(batch));
  for (auto& l : v) l = pick(rng);
  return test::Int64Tensor({batch, 1}, v);
}

// conv 3x3 (3 -> 4 channels) + batch_norm + relu, then fc + batch_norm (NC)
// + relu, then the classifier. `is_test`: both batch norms frozen (running
// statistics as constants), their scale and bias still trained.
Net CnnWithBatchNorm(bool is_test) {
  Net n;
  n.name = is_test ? "cnn, frozen batch_norm" : "cnn, batch_norm";
  ProgramBuilder b(3);
  const std::string x = b.Data("x", {-1, 3, 6, 6});
  const std::string labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  const std::string f = b.Param("conv.w", {4, 3, 3, 3}, Init::HeUniform(27));
  std::string h =
      b.Op1("conv2d", {{"Input", {x}}, {"Filter", {f}}}, {{"paddings", std::vector<int64_t>{1, 1}}}, "Output");
  h = b.Op1("relu", {{"X", {BatchNorm(b, h, 4, is_test, "bn0", &n.compared)}}});
  h = b.Op1("reshape2", {{"X", {h}}}, {{"shape", std::vector<int64_t>{0, 144}}});
  h = b.Op1("matmul", {{"X", {h}}, {"Y", {b.Param("fc0.w", {144, 16}, Init::XavierUniform(144, 16))}}});
  h = b.Op1("relu", {{"X", {BatchNorm(b, h, 16, is_test, "bn1", &n.compared)}}});
  FinishTraining(b, n, Fc(b, h, 16, 5, "head"), labels);
  std::mt19937 rng(11);
  for (int s = 0; s < 6; ++s) {
    n.steps.push_back({{"x", RandomTensor({8, 3, 6, 6}, DataType::kFP32, rng, -1, 2)}, {"labels", Labels(8, 5, rng)}});
  }
  return n;
}

// ids [B, 4, 1] -> lookup_table (padding_idx 0) -> [B, 4, 6] -> fc -> loss.
Net Embedding() {
  Net n;
  n.name = "embedding";
  ProgramBuilder b(4);
  const std::string ids = b.Data("ids", {-1, 4, 1}, DataType::kINT64);
  const std::string labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  const std::string table = b.Param("emb", {11, 6}, Init::Uniform(0.5f));
  std::string h = b.Op1("lookup_table", {{"W", {table}}, {"Ids", {ids}}}, {{"padding_idx", int64_t{0}}});
  h = b.Op1("reshape2", {{"X", {h}}}, {{"shape", std::vector<int64_t>{0, 24}}});
  FinishTraining(b, n, Fc(b, h, 24, 5, "head"), labels);
  std::mt19937 rng(12);
  std::uniform_int_distribution<int64_t> id(0, 10);
  for (int s = 0; s < 6; ++s) {
    std::vector<int64_t> v(8 * 4);
    for (auto& i : v) i = id(rng);  // repeats and padding ids in every batch
    n.steps.push_back({{"ids", test::Int64Tensor({8, 4, 1}, v)}, {"labels", Labels(8, 5, rng)}});
  }
  return n;
}

// fc -> relu -> dropout (state var advanced in place) -> fc -> loss.
Net WithDropout() {
  Net n;
  n.name = "dropout";
  ProgramBuilder b(5);
  const std::string x = b.Data("x", {-1, 20});
  const std::string labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  // The dropout state: a persistable int64 [1] var set by fill_constant.
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
  const std::string h = b.Op1("relu", {{"X", {Fc(b, x, 20, 32, "fc0")}}});
  b.RawOp(OpBuilder("dropout")
              .In("X", {h})
              .In("Seed", {"drop.state"})
              .Out("Out", {"drop.out"})
              .Out("Mask", {"drop.mask"})
              .Out("SeedOut", {"drop.state"})
              .Attr("dropout_prob", 0.3f)
              .Build());
  n.compared.push_back("drop.state");
  FinishTraining(b, n, Fc(b, "drop.out", 32, 5, "head"), labels);
  std::mt19937 rng(13);
  for (int s = 0; s < 6; ++s) {
    n.steps.push_back({{"x", RandomTensor({8, 20}, DataType::kFP32, rng)}, {"labels", Labels(8, 5, rng)}});
  }
  return n;
}

class ModelOpsJitTest : public test::JitTrainTest {
 protected:

  // JIT on in both launch modes against JIT off: every loss and every state
  // var agree within `tol` (relative, of max(1, |value|)), the vars in
  // `exact` bit for bit, and none of `types` is left outside a cluster.
  void ExpectJitMatches(const Net& n, const std::vector<std::string>& types, double tol,
                        const std::set<std::string>& exact = {}) {
    SCOPED_TRACE(n.name);
    const test::TrainRun off = test::TrainSteps(n, n.train);
    std::set<std::string> keep;
    for (const auto& [name, t] : n.steps[0]) keep.insert(name);
    keep.insert(n.loss);
    BuildJitPassOptions options;
    options.keep_vars = keep;
    const proto::ProgramDesc jitted = jit_.ApplyBuildJit(n.train, options);
    EXPECT_GE(test::CountOps(jitted, "jit_launch"), 1);
    for (const std::string& type : types) EXPECT_EQ(test::CountOps(jitted, type), 0) << type << " outside the clusters";
    for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
      SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
      jit_->ClearCache();
      jit_->SetLaunchMode(mode);
      const test::TrainRun on = test::TrainSteps(n, jitted, jit_.registry());
      EXPECT_GT(jit_->stats().compiles, 0);
      ASSERT_EQ(on.losses.size(), off.losses.size());
      for (size_t s = 0; s < off.losses.size(); ++s) {
        EXPECT_NEAR(on.losses[s], off.losses[s], tol * std::max(1.0f, std::fabs(off.losses[s]))) << "step " << s;
      }
      for (const auto& [name, want] : off.vars) {
        const Tensor& got = on.vars.at(name);
        if (!exact.count(name)) {
          EXPECT_EQ(test::CompareTensors(got, want, tol, tol), "") << name;
          continue;
        }
        ASSERT_EQ(got.bytes(), want.bytes()) << name;
        EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.bytes()), 0) << name << " differs";
      }
    }
  }
};

// Over six steps the parameters drift apart by float rounding: the JIT folds
// the matmul weight updates into the weight-gradient products (a different
// summation order). The first step's batch statistics see the same inputs,
// and the running statistics agree within rounding: inside the cluster
// blocked_batch_norm runs oneDNN's batch norm in the convolution's blocked
// layout, which sums each channel in another order than the plain one.
TEST_F(ModelOpsJitTest, CnnWithBatchNormMatchesJitOff) {
  Net n = CnnWithBatchNorm(/*is_test=*/false);
  ExpectJitMatches(n, {"batch_norm", "batch_norm_grad"}, 1e-6);
  Net first = n;
  first.steps.resize(1);
  ExpectJitMatches(first, {}, 1e-6);
  // The running statistics moved away from their start (0.1, 0.9).
  const test::TrainRun r = test::TrainSteps(n, n.train);
  EXPECT_NE(test::ValueAt(r.vars.at("bn0.mean"), 0), 0.1f);
  EXPECT_NE(test::ValueAt(r.vars.at("bn1.var"), 0), 0.9f);
}

TEST_F(ModelOpsJitTest, FrozenBatchNormFineTuningMatchesJitOff) {
  const Net n = CnnWithBatchNorm(/*is_test=*/true);
  ExpectJitMatches(n, {"batch_norm", "batch_norm_grad"}, 1e-6);
  const test::TrainRun r = test::TrainSteps(n, n.train);
  EXPECT_FLOAT_EQ(static_cast<float>(test::ValueAt(r.vars.at("bn0.mean"), 0)), 0.1f);
  EXPECT_FLOAT_EQ(static_cast<float>(test::ValueAt(r.vars.at("bn1.var"), 3)), 0.9f);
}

TEST_F(ModelOpsJitTest, EmbeddingMatchesJitOff) {
  ExpectJitMatches(Embedding(), {"lookup_table", "lookup_table_grad"}, 1e-6);
}

TEST_F(ModelOpsJitTest, DropoutMatchesJitOff) {
  const Net n = WithDropout();
  ExpectJitMatches(n, {"dropout", "dropout_grad"}, 1e-6, {"drop.state"});
  // Six training steps advanced the state six times.
  const test::TrainRun r = test::TrainSteps(n, n.train);
  uint64_t want = 5;
  for (int s = 0; s < 6; ++s) want += 0x9E3779B97F4A7C15ULL;
  EXPECT_EQ(r.vars.at("drop.state").data<int64_t>()[0], static_cast<int64_t>(want));
}

// The inference form (kiln export) of a forward program with batch_norm and
// dropout: both in is_test, so two runs agree, the running statistics and
// the dropout state stay as they are, and the JIT gives the same result.
TEST_F(ModelOpsJitTest, InferenceFormIsDeterministicAndLeavesStateAlone) {
  Net n = CnnWithBatchNorm(/*is_test=*/false);
  // The forward part of the training program: up to the loss.
  proto::ProgramDesc forward = n.train;
  auto* ops = forward.mutable_blocks(0)->mutable_ops();
  int softmax_at = 0;
  while (ops->Get(softmax_at).type() != "softmax_with_cross_entropy") ++softmax_at;
  const std::string logits = InputArgs(ops->Get(softmax_at), "Logits")[0];
  ops->DeleteSubrange(softmax_at, ops->size() - softmax_at);
  const proto::ProgramDesc inference = PruneForInference(forward, {"x"}, {logits});
  for (const auto& op : inference.blocks(0).ops()) {
    if (op.type() == "batch_norm") {
      EXPECT_TRUE(FindAttr(op, "is_test")->b());
    }
  }
  auto run = [&](const proto::ProgramDesc& program, const OpRegistry& registry) {
    Scope scope;
    Executor({}, registry).RunProgram(n.startup, scope);
    std::vector<Tensor> outs;
    for (int r = 0; r < 2; ++r) {
      FeedTensor(program.blocks(0), scope, "x", n.steps[0].at("x"));
      Executor({}, registry).RunProgram(program, scope);
      outs.emplace_back();
      outs.back().CopyFrom(scope.GetVar(logits)->Get());
    }
    EXPECT_EQ(test::CompareTensors(outs[0], outs[1], 0, 0), "");
    EXPECT_FLOAT_EQ(static_cast<float>(test::ValueAt(scope.GetVar("bn0.mean")->Get(), 0)), 0.1f);
    EXPECT_FLOAT_EQ(static_cast<float>(test::ValueAt(scope.GetVar("bn1.var")->Get(), 5)), 0.9f);
    return outs[0];
  };
  const Tensor off = run(inference, OpRegistry::Global());
  BuildJitPassOptions options;
  options.keep_vars = {"x", logits};
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(inference, options);
  EXPECT_EQ(test::CountOps(jitted, "batch_norm"), 0);
  EXPECT_EQ(test::CompareTensors(run(jitted, jit_.registry()), off, 1e-6, 1e-6), "");
}

// dropout in its inference form: the identity (upscale_in_train), and the
// state var it reads is not advanced.
TEST_F(ModelOpsJitTest, InferenceFormOfDropoutIsTheIdentity) {
  const Net n = WithDropout();
  proto::ProgramDesc forward = n.train;
  auto* ops = forward.mutable_blocks(0)->mutable_ops();
  int drop_at = 0;
  while (ops->Get(drop_at).type() != "dropout") ++drop_at;
  ops->DeleteSubrange(drop_at + 1, ops->size() - drop_at - 1);
  const proto::ProgramDesc inference = PruneForInference(forward, {"x"}, {"drop.out"});
  Scope scope;
  Executor().RunProgram(n.startup, scope);
  FeedTensor(inference.blocks(0), scope, "x", n.steps[0].at("x"));
  Executor().RunProgram(inference, scope);
  const std::string relu_out = InputArgs(ops->Get(drop_at), "X")[0];
  EXPECT_EQ(test::CompareTensors(scope.GetVar("drop.out")->Get(), scope.GetVar(relu_out)->Get(), 0, 0), "");
  EXPECT_EQ(scope.GetVar("drop.state")->Get().data<int64_t>()[0], 5);
}

}  // namespace
}  // namespace kiln
