// Online shadow checking (launch_op/shadow_check.h and the jit_launch op):
// the comparison rules, and end to end a kernel made wrong on purpose through
// the test-only fault hook: without checks training goes wrong, with them the
// cluster is reported once and denied and training matches the JIT-off run.
#include "launch_op/shadow_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/trainer.h"
#include "launch_op/jit_launch_op.h"
#include "tests/test_jit.h"
#include "tests/op_test_util.h"
#include "tests/train_cases.h"

namespace kiln {
namespace {

using jit::ShadowOptions;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

ShadowOptions Tol(double rtol = 1e-3, double atol = 1e-5) {
  ShadowOptions t;
  t.every = 1;
  t.rtol = rtol;
  t.atol = atol;
  return t;
}

TEST(ShadowCompareTest, WithinTheToleranceIsNoMismatch) {
  const Tensor want = test::FloatTensor({4}, {1.0f, -2.0f, 0.0f, 1000.0f});
  const Tensor got = test::FloatTensor({4}, {1.0009f, -2.001f, 9e-6f, 1000.9f});
  const jit::OutputDiff d = jit::CompareOutput(got, want, Tol());
  EXPECT_EQ(d.mismatches, 0);
  EXPECT_LE(d.worst, 1.0);
  EXPECT_NEAR(d.max_abs, 0.9, 1e-3);
  EXPECT_NEAR(d.max_rel, 0.0009, 1e-5);
}

TEST(ShadowCompareTest, BeyondTheToleranceCountsAndNamesTheFirstElement) {
  const Tensor want = test::FloatTensor({4}, {1.0f, 2.0f, 0.0f, 4.0f});
  const Tensor got = test::FloatTensor({4}, {1.0f, 2.5f, 1e-4f, 4.0f});
  const jit::OutputDiff d = jit::CompareOutput(got, want, Tol());
  EXPECT_EQ(d.mismatches, 2);
  EXPECT_NEAR(d.max_abs, 0.5, 1e-6);
  EXPECT_NEAR(d.max_rel, 0.25, 1e-6);
  EXPECT_GT(d.worst, 1.0);
  EXPECT_EQ(d.first_mismatch, "flat index 1: jit 2.5, framework 2");
}

TEST(ShadowCompareTest, NanAndInfRule) {
  auto mismatches = [](float got, float want) {
    return jit::CompareOutput(test::FloatTensor({1}, {got}), test::FloatTensor({1}, {want}), Tol()).mismatches;
  };
  EXPECT_EQ(mismatches(kNaN, kNaN), 0);
  EXPECT_EQ(mismatches(kInf, kInf), 0);
  EXPECT_EQ(mismatches(-kInf, -kInf), 0);
  EXPECT_EQ(mismatches(kNaN, 1.0f), 1);
  EXPECT_EQ(mismatches(1.0f, kNaN), 1);
  EXPECT_EQ(mismatches(kInf, -kInf), 1);
  EXPECT_EQ(mismatches(kInf, 3e38f), 1);
  EXPECT_EQ(mismatches(kNaN, kInf), 1);
}

TEST(ShadowCompareTest, IntegersExactlyAndShapesMustAgree) {
  EXPECT_EQ(jit::CompareOutput(test::Int64Tensor({2}, {3, 4}), test::Int64Tensor({2}, {3, 4}), Tol()).mismatches, 0);
  EXPECT_EQ(jit::CompareOutput(test::Int64Tensor({2}, {3, 5}), test::Int64Tensor({2}, {3, 4}), Tol()).mismatches, 1);
  const jit::OutputDiff d =
      jit::CompareOutput(test::FloatTensor({2}, {1, 2}), test::FloatTensor({1, 2}, {1, 2}), Tol());
  EXPECT_EQ(d.mismatches, 2);
  EXPECT_EQ(d.first_mismatch, "jit gave f32[2], framework f32[1,2]");
}

// The framework's own spread widens the tolerance: noise the framework itself
// cannot agree on is not a JIT fault, a difference well beyond it is.
TEST(ShadowCompareTest, TheFrameworkSpreadWidensTheTolerance) {
  const Tensor want = test::FloatTensor({3}, {1e-3f, -2e-3f, 0.0f});
  const Tensor alt = test::FloatTensor({3}, {-4e-3f, 1e-3f, 2e-3f});
  const Tensor noisy = test::FloatTensor({3}, {5e-3f, -9e-3f, 3e-3f});
  const double spread = jit::Spread(alt, want);
  EXPECT_NEAR(spread, 5e-3, 1e-9);
  EXPECT_GT(jit::CompareOutput(noisy, want, Tol()).mismatches, 0);
  EXPECT_EQ(jit::CompareOutput(noisy, want, Tol(), spread).mismatches, 0);
  const Tensor wrong = test::FloatTensor({3}, {1e-3f, 0.5f, 0.0f});
  EXPECT_EQ(jit::CompareOutput(wrong, want, Tol(), spread).mismatches, 1);
}

JitSubgraph TwoOutputCluster() {
  JitSubgraph sg;
  *sg.block.add_ops() = OpBuilder("relu").In("X", {"x"}).Out("Out", {"a"}).Build();
  *sg.block.add_ops() = OpBuilder("scale").In("X", {"a"}).Out("Out", {"b"}).Attr("scale", 2.0f).Build();
  *sg.block.add_ops() = OpBuilder("relu").In("X", {"b"}).Out("Out", {"b"}).Build();
  sg.inputs = {"x"};
  sg.outputs = {"a", "b"};
  return sg;
}

TEST(ShadowFailureTest, TheWorstOutputIsReportedWithTheFirstOpThatWritesIt) {
  const JitSubgraph sg = TwoOutputCluster();
  const Tensor a = test::FloatTensor({2}, {1, 2}), b = test::FloatTensor({2}, {2, 4});
  const Tensor a_bad = test::FloatTensor({2}, {1.1f, 2}), b_bad = test::FloatTensor({2}, {2, 40});
  EXPECT_FALSE(jit::FindShadowFailure(sg, {&a, &b}, {&a, &b}, Tol()).has_value());
  const auto f = jit::FindShadowFailure(sg, {&a_bad, &b_bad}, {&a, &b}, Tol());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->var, "b");
  EXPECT_EQ(f->op, OpLabel(sg.block.ops(1), 1)) << "the first writer, not the in-place relu after it";
  EXPECT_EQ(f->shape, "f32[2]");
  EXPECT_NEAR(f->max_abs_error, 36.0, 1e-6);
  EXPECT_NEAR(f->max_rel_error, 9.0, 1e-6);
  EXPECT_EQ(f->mismatches, 1);
  EXPECT_EQ(f->numel, 2);
  EXPECT_EQ(f->framework_spread, -1.0);
  // An output handed out without data is not compared.
  EXPECT_FALSE(jit::FindShadowFailure(sg, {&a, nullptr}, {&a, &b}, Tol()).has_value());
}

// ---- End to end: a wrong kernel through the test-only fault hook ---------------------

// Each test has a JIT of its own (test::TestJit): its options, cache and
// denials start fresh and go with it.
class ShadowTrainTest : public ::testing::Test {
 protected:
  proto::ProgramDesc Jit(const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    BuildJitPassOptions o;
    o.keep_vars = keep;
    return jit_.ApplyBuildJit(p, o);
  }
  // The key of the cluster of `model`'s training program that holds its
  // optimizer updates.
  std::string UpdateCluster(const Model& m) {
    Jit(m.train, {m.features, m.labels, m.loss});
    for (const std::string& key : jit_->cache().Keys()) {
      for (const auto& op : jit_->cache().GetSubgraph(key).block.ops()) {
        if (op.type() == "adam" || op.type() == "sgd" || op.type() == "momentum") return key;
      }
    }
    return "";
  }
  // The runtime's options with a fault that adds 0.5 to the first element of
  // every output of the last instruction of cluster `key`: a kernel that is
  // wrong.
  jit::JitOptions Faulty(const std::string& key, int shadow_every) {
    jit::JitOptions o = jit_->options();
    o.shadow.every = shadow_every;
    o.fault_for_testing = [key](const jit::CompiledObject& obj, size_t i, const runtime::BufferView* args) {
      const runtime::Instruction& ins = obj.program.instructions[i];
      if (obj.key != key || i + 1 != obj.program.instructions.size()) return;
      for (size_t k = static_cast<size_t>(ins.num_inputs); k < ins.args.size(); ++k) {
        if (args[k].data != nullptr && args[k].dtype == DataType::kFP32) static_cast<float*>(args[k].data)[0] += 0.5f;
      }
    };
    return o;
  }
  TrainOptions Steps(int steps) {
    TrainOptions o;
    o.epochs = 100;
    o.batch_size = 16;
    o.max_steps = steps;
    o.registry = &jit_.registry();
    o.before_step = [this](int64_t step) { jit_->launch().SetStep(step); };
    return o;
  }
  test::TestJit jit_;
};

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST_F(ShadowTrainTest, AWrongKernelIsReportedOnceDeniedAndTrainingRecovers) {
  const test::TrainCase c = test::SmallTrainCases()[0];  // the MLP, with adam
  const std::string key = UpdateCluster(c.model);
  ASSERT_FALSE(key.empty());
  const TrainResult off = Train(c.model, c.train, c.test, Steps(12));
  for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    const std::string what = mode == jit::LaunchMode::kRuntime ? "runtime" : "executor";
    jit_->SetLaunchMode(mode);
    TrainOptions o = Steps(12);
    o.program_transform = [this](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
      return Jit(p, keep);
    };

    // Unchecked, the fault corrupts every step's update: training goes wrong.
    jit_->ClearCache();
    jit_->Configure(Faulty(key, /*shadow_every=*/0));
    TrainOptions unchecked = o;
    unchecked.stop_on_nonfinite = false;
    const TrainResult broken = Train(c.model, c.train, c.test, unchecked);
    int differ = 0;
    for (size_t i = 0; i < off.losses.size(); ++i) differ += !(std::fabs(broken.losses[i] - off.losses[i]) <= 1e-2);
    EXPECT_GE(differ, 5) << what << ": the fault must change training for this test to mean anything";

    jit_->ClearCache();
    jit_->Configure(Faulty(key, /*shadow_every=*/1));
    testing::internal::CaptureStderr();
    const TrainResult checked = Train(c.model, c.train, c.test, o);
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_EQ(checked.losses.size(), off.losses.size());
    for (size_t i = 0; i < off.losses.size(); ++i) {
      EXPECT_NEAR(checked.losses[i], off.losses[i], 1e-4 * std::max(1.0f, std::fabs(off.losses[i])))
          << what << " step " << i + 1;
    }
    EXPECT_EQ(Count(err, "shadow check failed"), 1) << err;
    EXPECT_NE(err.find("cluster " + key), std::string::npos) << err;
    EXPECT_NE(err.find("at step 1 (launch 1 of the cluster)"), std::string::npos) << err;
    const jit::JitStats s = jit_->stats();
    ASSERT_EQ(s.shadow_failures.size(), 1u) << what;
    const jit::ShadowFailure& f = s.shadow_failures[0];
    EXPECT_EQ(f.key, key);
    EXPECT_EQ(f.step, 1);
    EXPECT_EQ(f.launch, 1);
    EXPECT_GE(f.max_abs_error, 0.49) << f.ToString();
    EXPECT_NE(f.op.find("op #"), std::string::npos) << f.ToString();
    EXPECT_NE(err.find("'" + f.var + "'"), std::string::npos) << err;
    EXPECT_EQ(s.denied_calls, 11) << what << ": steps 2..12 run the cluster's framework ops";
    EXPECT_GT(s.shadow_checks, 12) << what << ": the other clusters are checked every launch";
  }
}

// Every N-th launch of each cluster is checked, the first included; a correct
// JIT passes every check, for each model and in both launch modes.
TEST_F(ShadowTrainTest, EveryNthLaunchIsCheckedAndCorrectKernelsPass) {
  for (const test::TrainCase& c : test::SmallTrainCases()) {
    const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
    int launch_ops = 0;
    for (const auto& op : p.blocks(0).ops()) launch_ops += op.type() == "jit_launch";
    for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
      jit_->SetLaunchMode(mode);
      jit_->ClearCache();
      jit::JitOptions o = jit_->options();
      o.shadow.every = 3;
      jit_->Configure(o);
      Scope scope;
      Executor().RunProgram(c.model.startup, scope);
      Executor exec = jit_.executor();
      auto plan = exec.Prepare(p, 0, {c.model.loss});
      for (int step = 0; step < 7; ++step) {  // launches 1, 4 and 7 of each cluster are checked
        const Dataset b = SliceRows(c.train, step * 16, (step + 1) * 16);
        FeedTensor(p.blocks(0), scope, c.model.features, b.features);
        FeedTensor(p.blocks(0), scope, c.model.labels, b.labels);
        exec.Run(*plan, scope);
      }
      const jit::JitStats s = jit_->stats();
      EXPECT_TRUE(s.shadow_failures.empty()) << c.name << ": " << s.shadow_failures[0].ToString();
      EXPECT_EQ(s.failures, 0) << c.name;
      EXPECT_EQ(s.shadow_checks, 3 * launch_ops) << c.name;
      EXPECT_EQ(s.denied_calls, 0) << c.name;
    }
  }
}

}  // namespace
}  // namespace kiln
