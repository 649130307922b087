// The JIT end to end: training with the JIT on (each launch mode) matches
// training with it off; compiles happen once per shape signature; threads
// share compiled objects; in-place updates donate or copy-protect.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "framework/data/digits.h"
#include "framework/data/synthetic.h"
#include "framework/trainer.h"
#include "launch_op/jit_launch_op.h"
#include "tests/test_jit.h"
#include "tests/op_test_util.h"
#include "tests/train_cases.h"

namespace kiln {
namespace {


// Each test has a JIT of its own (test::TestJit).
class JitTrainTest : public ::testing::Test {
 protected:
  proto::ProgramDesc Jit(const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    return JitDenying(p, keep, {});
  }
  proto::ProgramDesc JitDenying(const proto::ProgramDesc& p, const std::set<std::string>& keep,
                                std::vector<std::string> deny) {
    BuildJitPassOptions o;
    o.keep_vars = keep;
    o.deny_ops = std::move(deny);
    return jit_.ApplyBuildJit(p, o);
  }
  // Trains through this test's JIT ops.
  TrainOptions WithJit(TrainOptions o) {
    o.registry = &jit_.registry();
    o.program_transform = [this](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
      return Jit(p, keep);
    };
    return o;
  }
  // Runs `steps` training steps of `program` on batches of `batch` rows.
  void RunSteps(const Model& m, const proto::ProgramDesc& program, Scope& scope, const Dataset& data, int64_t batch,
                int steps, std::vector<float>* losses = nullptr) {
    Executor exec = jit_.executor();
    auto plan = exec.Prepare(program, 0, {m.loss});
    for (int s = 0; s < steps; ++s) {
      const Dataset b = SliceRows(data, s * batch, (s + 1) * batch);
      FeedTensor(program.blocks(0), scope, m.features, b.features);
      FeedTensor(program.blocks(0), scope, m.labels, b.labels);
      exec.Run(*plan, scope);
      if (losses) losses->push_back(scope.GetVar(m.loss)->Get().data<float>()[0]);
    }
  }
  static int CountOps(const proto::ProgramDesc& p, const std::string& type) {
    int n = 0;
    for (const auto& op : p.blocks(0).ops()) n += op.type() == type;
    return n;
  }
  test::TestJit jit_;
};

void ExpectSameLosses(const TrainResult& off, const TrainResult& on, const std::string& what) {
  ASSERT_EQ(off.losses.size(), on.losses.size()) << what;
  for (size_t i = 0; i < off.losses.size(); ++i) {
    EXPECT_NEAR(on.losses[i], off.losses[i], 1e-4 * std::max(1.0f, std::fabs(off.losses[i])))
        << what << " step " << i;
  }
}

using Case = test::TrainCase;

std::vector<Case> Models() { return test::SmallTrainCases(); }

TEST_F(JitTrainTest, ThirtyStepsMatchWithJitOffInBothLaunchModes) {
  for (const Case& c : Models()) {
    TrainOptions o;
    o.epochs = 100;
    o.batch_size = 16;
    o.max_steps = 30;
    const TrainResult off = Train(c.model, c.train, c.test, o);
    ASSERT_EQ(off.steps, 30);
    o = WithJit(o);
    for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
      jit_->ClearCache();
      jit_->SetLaunchMode(mode);
      const TrainResult on = Train(c.model, c.train, c.test, o);
      ExpectSameLosses(off, on, c.name + (mode == jit::LaunchMode::kRuntime ? " runtime" : " executor"));
      EXPECT_NEAR(on.test_accuracy, off.test_accuracy, 1e-6) << c.name;
      EXPECT_GT(jit_->stats().compiles, 0) << c.name;
    }
  }
}

TEST_F(JitTrainTest, MlpStepBecomesFusedMatmulsAndGeneratedKernels) {
  const Case c = Models()[0];
  const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
  Scope scope;
  Executor().RunProgram(c.model.startup, scope);
  Executor exec = jit_.executor();
  auto plan = exec.Prepare(p, 0, {c.model.loss});
  const Dataset b = SliceRows(c.train, 0, 32);
  FeedTensor(p.blocks(0), scope, c.model.features, b.features);
  FeedTensor(p.blocks(0), scope, c.model.labels, b.labels);
  exec.Run(*plan, scope);
  std::string listing;
  for (const auto& obj : jit_->cache().CachedObjects()) listing += obj->Listing();
  // fc0: matmul + bias + relu in one oneDNN primitive; the backward and the
  // optimizer updates in generated kernels.
  EXPECT_NE(listing.find("+ bias + relu post-op"), std::string::npos) << listing;
  EXPECT_NE(listing.find("generated"), std::string::npos) << listing;
  EXPECT_NE(listing.find("relu_grad"), std::string::npos) << listing;
  EXPECT_NE(listing.find("fusing adam adam adam adam"), std::string::npos) << listing;
}

TEST_F(JitTrainTest, ProgramsAreClusteredAndRunOnlyThroughLaunchOps) {
  for (const Case& c : Models()) {
    const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
    EXPECT_GE(CountOps(p, "jit_launch"), 1) << c.name;
    EXPECT_LT(p.blocks(0).ops_size(), c.model.train.blocks(0).ops_size() / 2) << c.name;
  }
}

TEST_F(JitTrainTest, SecondStepCompilesNothingAndANewBatchSizeCompilesOnce) {
  const Case c = Models()[0];
  const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
  const int64_t clusters = CountOps(p, "jit_launch");
  Scope scope;
  Executor().RunProgram(c.model.startup, scope);
  RunSteps(c.model, p, scope, c.train, 32, 1);
  const int64_t after_first = jit_->stats().compiles;
  EXPECT_EQ(after_first, clusters);
  RunSteps(c.model, p, scope, c.train, 32, 3);
  EXPECT_EQ(jit_->stats().compiles, after_first);
  EXPECT_EQ(jit_->stats().hits, 3 * clusters);
  RunSteps(c.model, p, scope, c.train, 17, 2);
  EXPECT_EQ(jit_->stats().compiles, after_first + clusters);
}

TEST_F(JitTrainTest, EightThreadsCompileEachSignatureOnceAndAgree) {
  const Case c = Models()[0];
  const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
  const int64_t clusters = CountOps(p, "jit_launch");
  std::vector<float> reference;
  {
    Scope scope;
    Executor().RunProgram(c.model.startup, scope);
    RunSteps(c.model, c.model.train, scope, c.train, 32, 5, &reference);
  }
  jit_->ClearCache();
  std::vector<std::vector<float>> losses(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Scope scope;
      Executor().RunProgram(c.model.startup, scope);
      RunSteps(c.model, p, scope, c.train, 32, 5, &losses[t]);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(jit_->stats().compiles, clusters);
  for (int t = 0; t < 8; ++t) {
    ASSERT_EQ(losses[t].size(), reference.size());
    for (size_t s = 0; s < reference.size(); ++s) EXPECT_NEAR(losses[t][s], reference[s], 1e-5) << t;
  }
}

TEST_F(JitTrainTest, InPlaceUpdatesDonateOrCopyProtect) {
  const Case c = Models()[0];
  const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
  Scope scope;
  Executor().RunProgram(c.model.startup, scope);
  RunSteps(c.model, p, scope, c.train, 32, 1);
  const jit::LaunchStats first = jit_->stats().launch;
  EXPECT_GT(first.donated, 0);
  EXPECT_EQ(first.copy_protected, 0);
  // Another tensor shares fc0.w's buffer: the update must not touch it.
  Tensor* w = scope.GetTensor("fc0.w");
  Tensor snapshot;
  snapshot.CopyFrom(*w);
  Tensor sharer = *w;
  ASSERT_TRUE(sharer.IsSharedBufferWith(*w));
  RunSteps(c.model, p, scope, c.train, 32, 1);
  EXPECT_EQ(jit_->stats().launch.copy_protected, 1);
  EXPECT_FALSE(sharer.IsSharedBufferWith(*scope.GetTensor("fc0.w")));
  EXPECT_EQ(test::CompareTensors(sharer, snapshot, 0, 0), "");
  EXPECT_NE(test::CompareTensors(*scope.GetTensor("fc0.w"), snapshot, 0, 0), "");
}

TEST_F(JitTrainTest, CacheIsBoundedLeastRecentlyUsedFirst) {
  const Case c = Models()[0];
  // Denying the loss splits the step into a forward and a backward cluster.
  const proto::ProgramDesc p =
      JitDenying(c.model.train, {c.model.features, c.model.labels, c.model.loss}, {"softmax_with_cross_entropy"});
  ASSERT_EQ(CountOps(p, "jit_launch"), 2);
  jit::JitOptions o = jit_->options();
  o.cache_capacity = 1;  // two clusters take turns
  jit_->Configure(o);
  Scope jit_scope, ref_scope;
  Executor().RunProgram(c.model.startup, jit_scope);
  Executor().RunProgram(c.model.startup, ref_scope);
  std::vector<float> got, want;
  RunSteps(c.model, p, jit_scope, c.train, 32, 3, &got);
  RunSteps(c.model, c.model.train, ref_scope, c.train, 32, 3, &want);
  const jit::JitStats stats = jit_->stats();
  EXPECT_EQ(jit_->cache().CachedObjects().size(), 1u);
  EXPECT_EQ(stats.compiles, 6);  // both clusters recompile every step
  EXPECT_EQ(stats.evictions, 5);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
}

TEST_F(JitTrainTest, RecompileLimitFallsBackToFrameworkOps) {
  const Case c = Models()[0];
  const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
  jit::JitOptions o = jit_->options();
  o.recompile_limit = 2;
  o.dynamic = jit::DynamicPolicy::kOff;  // every batch size its own signature
  jit_->Configure(o);
  Scope jit_scope, ref_scope;
  Executor().RunProgram(c.model.startup, jit_scope);
  Executor().RunProgram(c.model.startup, ref_scope);
  std::vector<float> got, want;
  for (int64_t batch : {8, 9, 10, 11}) {
    RunSteps(c.model, p, jit_scope, c.train, batch, 1, &got);
    RunSteps(c.model, c.model.train, ref_scope, c.train, batch, 1, &want);
  }
  EXPECT_GT(jit_->stats().launch.framework_fallbacks, 0);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
}

TEST_F(JitTrainTest, NewBatchSizesRunOnOneDynamicCompilePastTheLimit) {
  // --jit_dynamic auto: the first batch size compiles specialised, the second
  // once for every batch size; the others are instances (no compile, no
  // framework fallback), even past a limit of 2, in both launch modes.
  const Case c = Models()[0];
  const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
  for (jit::LaunchMode mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    jit_->ClearCache();
    jit::JitOptions o = jit_->options();
    o.recompile_limit = 2;
    o.dynamic = jit::DynamicPolicy::kAuto;
    o.launch_mode = mode;
    jit_->Configure(o);
    Scope jit_scope, ref_scope;
    Executor().RunProgram(c.model.startup, jit_scope);
    Executor().RunProgram(c.model.startup, ref_scope);
    std::vector<float> got, want;
    for (int64_t batch : {8, 9, 10, 11, 3, 32}) {
      RunSteps(c.model, p, jit_scope, c.train, batch, 1, &got);
      RunSteps(c.model, c.model.train, ref_scope, c.train, batch, 1, &want);
    }
    const jit::JitStats s = jit_->stats();
    EXPECT_EQ(s.launch.framework_fallbacks, 0);
    EXPECT_EQ(s.dynamic_compiles, 1);
    EXPECT_EQ(s.compiles, 2);
    EXPECT_EQ(s.instances, 4);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
  }
}

TEST_F(JitTrainTest, SgdWeightUpdatesFoldIntoTheWeightGradientMatmul) {
  const Case c = Models()[2];  // the transformer, trained with sgd
  const proto::ProgramDesc p = Jit(c.model.train, {c.model.features, c.model.labels, c.model.loss});
  Scope scope;
  Executor().RunProgram(c.model.startup, scope);
  RunSteps(c.model, p, scope, c.train, 16, 1);
  std::string listing;
  for (const auto& obj : jit_->cache().CachedObjects()) listing += obj->Listing();
  size_t folded = 0;
  for (size_t at = listing.find("sgd step in one primitive"); at != std::string::npos;
       at = listing.find("sgd step in one primitive", at + 1)) {
    ++folded;
  }
  // attn q/k/v/out, ffn0, ffn1, head: every 2-D weight of the block.
  EXPECT_EQ(folded, 7u) << listing;
  EXPECT_EQ(listing.find("fc0.w@GRAD"), std::string::npos);
}

TEST_F(JitTrainTest, BatchOneUsesMatrixVectorKernelsAndMatches) {
  const TrainTest digits = LoadDigits(kDefaultDigitsPath, 4);
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kSgd;
  tc.lr = 0.05f;
  MlpConfig mc;
  mc.hidden = {96, 33};
  const Model m = BuildMlp(mc, tc);
  TrainOptions o;
  o.epochs = 1;
  o.batch_size = 1;
  o.max_steps = 40;
  const TrainResult off = Train(m, digits.train, digits.test, o);
  o = WithJit(o);
  const TrainResult on = Train(m, digits.train, digits.test, o);
  ExpectSameLosses(off, on, "mlp batch 1");
  std::string listing;
  for (const auto& obj : jit_->cache().CachedObjects()) listing += obj->Listing();
  EXPECT_NE(listing.find("matrix-vector product (kiln gemv, batch 1)"), std::string::npos) << listing;
  EXPECT_NE(listing.find("dX = dY W^T and W -= lr * X^T dY in one pass over W"), std::string::npos) << listing;
}

}  // namespace
}  // namespace kiln
