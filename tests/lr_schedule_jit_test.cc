// lr_schedule inside JIT clusters (JitLowering::kFramework): a small training
// program with each schedule kind and sgd or adam runs with the JIT off and
// on, in both launch modes; the op sits in the cluster of the updates, every
// step's learning rate and counter equal the JIT-off ones bit for bit, and
// sgd's weight-gradient fold still fires. The counter is updated in place
// (donated) and copy-protected when another tensor shares its buffer, and a
// run resumed from a checkpoint ends bit for bit where an uninterrupted one
// does.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "framework/backward.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/lr_schedule.h"
#include "framework/optimizer_builder.h"
#include "framework/program_builder.h"
#include "tests/jit_train_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {


constexpr int kSteps = 12;

struct Net {
  proto::ProgramDesc startup, train;
  std::string loss, lr, step;
  std::vector<std::string> params;
  std::vector<Tensor> feeds;  // x of each step
};

// loss = mean(tanh(relu(x @ w0 + b0) @ w1)), `kind` updates, schedule `s`.
Net ScheduledNet(OptimizerKind kind, const LrSchedule& s) {
  Net n;
  ProgramBuilder b(41);
  const std::string x = b.Data("x", {-1, 6});
  const std::string w0 = b.Param("w0", {6, 8}, Init::XavierUniform(6, 8));
  const std::string b0 = b.Param("b0", {8}, Init::Uniform(0.5f));
  const std::string w1 = b.Param("w1", {8, 3}, Init::XavierUniform(8, 3));
  std::string h = b.Op1("matmul", {{"X", {x}}, {"Y", {w0}}});
  h = b.Op1("relu", {{"X", {b.Op1("elementwise_add", {{"X", {h}}, {"Y", {b0}}})}}});
  const std::string z = b.Op1("tanh", {{"X", {b.Op1("matmul", {{"X", {h}}, {"Y", {w1}}})}}});
  n.loss = b.Op1("mean", {{"X", {z}}});
  const auto params = AppendBackward(&b.main(), n.loss);
  for (const auto& pg : params) n.params.push_back(pg.first);
  OptimizerConfig oc;
  oc.kind = kind;
  n.lr = AppendOptimizer(b, params, oc);
  n.step = AppendLrSchedule(b, n.lr, s);
  n.startup = b.startup();
  n.train = b.main();
  std::mt19937 rng(42);
  for (int i = 0; i < kSteps; ++i) n.feeds.push_back(test::RandomTensor({9, 6}, DataType::kFP32, rng));
  return n;
}

std::vector<std::pair<std::string, LrSchedule>> Schedules() {
  LrSchedule cosine;
  cosine.kind = "cosine";
  cosine.learning_rate = 0.2f;
  cosine.T_max = 5;  // the run goes past T_max
  cosine.eta_min = 0.01f;
  cosine.linear_warmup_steps = 3;
  cosine.start_lr = 0.02f;
  cosine.end_lr = 0.2f;
  LrSchedule exponential;
  exponential.kind = "exponential";
  exponential.learning_rate = 0.3f;
  exponential.gamma = 0.83f;
  LrSchedule piecewise;
  piecewise.kind = "piecewise";
  piecewise.boundaries = {2, 7};
  piecewise.values = {0.3f, 0.1f, 0.03f};
  LrSchedule noam;
  noam.kind = "noam";
  noam.learning_rate = 2.f;
  noam.d_model = 16;
  noam.warmup_steps = 4;
  return {{"cosine", cosine}, {"exponential", exponential}, {"piecewise", piecewise}, {"noam", noam}};
}

struct Steps {
  std::vector<float> losses, lrs, steps;
  std::map<std::string, Tensor> params;
};

// Steps [from, to) of `n` through `program`, its ops from `registry`, on
// `scope` (startup already run).
Steps Train(const Net& n, const proto::ProgramDesc& program, const OpRegistry& registry, Scope& scope, int from = 0,
            int to = kSteps) {
  Executor exec({}, registry);
  auto plan = exec.Prepare(program, 0, {n.loss, n.lr, n.step});
  Steps r;
  for (int i = from; i < to; ++i) {
    FeedTensor(program.blocks(0), scope, "x", n.feeds[i]);
    exec.Run(*plan, scope);
    r.losses.push_back(scope.GetVar(n.loss)->Get().data<float>()[0]);
    r.lrs.push_back(scope.GetVar(n.lr)->Get().data<float>()[0]);
    r.steps.push_back(scope.GetVar(n.step)->Get().data<float>()[0]);
  }
  for (const auto& p : n.params) r.params[p].CopyFrom(scope.GetVar(p)->Get());
  return r;
}

Steps TrainFresh(const Net& n, const proto::ProgramDesc& program, const OpRegistry& registry) {
  Scope scope;
  Executor().RunProgram(n.startup, scope);
  return Train(n, program, registry, scope);
}

// n.train through build_jit_pass, its subgraphs stored in `jit`.
proto::ProgramDesc Jitted(test::TestJit& jit, const Net& n, BuildJitReport* report = nullptr) {
  BuildJitPassOptions options;
  options.keep_vars = {"x", n.loss};
  return jit.ApplyBuildJit(n.train, options, report);
}

// The kernel names of every instruction `jit` compiled.
std::set<std::string> CompiledKernels(const jit::JitRuntime& jit) {
  std::set<std::string> names;
  for (const auto& obj : jit.cache().CachedObjects()) {
    for (const auto& ins : obj->program.instructions) names.insert(ins.kernel->name());
  }
  return names;
}

class LrScheduleJitTest : public test::JitTrainTest {};

TEST_F(LrScheduleJitTest, RunsInTheUpdatesClusterAndMatchesJitOff) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam}) {
    for (const auto& [name, s] : Schedules()) {
      SCOPED_TRACE(name + (kind == OptimizerKind::kSgd ? " sgd" : " adam"));
      const Net n = ScheduledNet(kind, s);
      const std::string update = kind == OptimizerKind::kSgd ? "sgd" : "adam";
      BuildJitReport report;
      const proto::ProgramDesc jitted = Jitted(jit_, n, &report);
      EXPECT_EQ(test::CountOps(jitted, "lr_schedule"), 0) << "left outside the clusters\n" << report.ToString();
      // One cluster holds the schedule and every update.
      int holders = 0;
      for (const auto& c : report.clusters) {
        const int scheds = std::count(c.ops.begin(), c.ops.end(), "op #0 'lr_schedule'");
        int updates = 0;
        for (const auto& op : c.ops) updates += op.find("'" + update + "'") != std::string::npos;
        if (scheds == 0) continue;
        ++holders;
        EXPECT_EQ(updates, static_cast<int>(n.params.size())) << report.ToString();
      }
      EXPECT_EQ(holders, 1) << report.ToString();
      const Steps off = TrainFresh(n, n.train, jit_.registry());
      for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
        SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
        jit_->ClearCache();
        jit_->SetLaunchMode(mode);
        const Steps on = TrainFresh(n, jitted, jit_.registry());
        EXPECT_EQ(on.lrs, off.lrs);  // the same kernel: bit for bit
        EXPECT_EQ(on.steps, off.steps);
        EXPECT_EQ(on.steps.back(), static_cast<float>(kSteps));
        for (int i = 0; i < kSteps; ++i) {
          EXPECT_NEAR(on.losses[i], off.losses[i], 1e-5 * std::max(1.0f, std::fabs(off.losses[i]))) << "step " << i;
        }
        for (const auto& [p, want] : off.params) {
          EXPECT_EQ(test::CompareTensors(on.params.at(p), want, 1e-5, 1e-5), "") << p;
        }
        if (mode != jit::LaunchMode::kRuntime) continue;
        const std::set<std::string> kernels = CompiledKernels(jit_.runtime());
        EXPECT_EQ(kernels.count("lr_schedule"), 1u);
        // The schedule runs before the backward pass, so no lr write stands
        // between a weight gradient and its sgd step.
        const bool folded = std::any_of(kernels.begin(), kernels.end(),
                                        [](const std::string& k) { return k.rfind("matmul_sgd", 0) == 0; });
        EXPECT_EQ(folded, kind == OptimizerKind::kSgd);
      }
    }
  }
}

// The counter is written where it lies while the scope alone holds it, and
// into a fresh buffer when another tensor shares it (that one keeps its value).
TEST_F(LrScheduleJitTest, TheCounterIsDonatedOrCopyProtected) {
  const Net n = ScheduledNet(OptimizerKind::kSgd, Schedules()[0].second);
  const proto::ProgramDesc jitted = Jitted(jit_, n);
  Scope scope;
  Executor().RunProgram(n.startup, scope);
  Train(n, jitted, jit_.registry(), scope, 0, 2);
  const void* buffer = scope.GetVar(n.step)->Get().raw_data();
  Train(n, jitted, jit_.registry(), scope, 2, 4);
  EXPECT_EQ(scope.GetVar(n.step)->Get().raw_data(), buffer);
  EXPECT_EQ(scope.GetVar(n.step)->Get().data<float>()[0], 4.f);
  Tensor held;
  held.ShareBufferWith(scope.GetVar(n.step)->Get());
  Train(n, jitted, jit_.registry(), scope, 4, 5);
  EXPECT_EQ(held.data<float>()[0], 4.f);
  EXPECT_EQ(scope.GetVar(n.step)->Get().data<float>()[0], 5.f);
  EXPECT_NE(scope.GetVar(n.step)->Get().raw_data(), held.raw_data());
}

// Seven steps, a checkpoint, a fresh scope loaded from it, five more steps:
// the same rates, counter and parameters as twelve steps in one go.
TEST_F(LrScheduleJitTest, ResumingFromACheckpointIsExact) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln_lr_jit_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Net n = ScheduledNet(OptimizerKind::kAdam, Schedules()[0].second);
  const proto::ProgramDesc jitted = Jitted(jit_, n);
  const Steps whole = TrainFresh(n, jitted, jit_.registry());
  std::string ckpt;
  {
    Scope scope;
    Executor().RunProgram(n.startup, scope);
    Train(n, jitted, jit_.registry(), scope, 0, 7);
    LoopState loop;
    loop.step = 7;
    ckpt = SaveCheckpoint(dir.string(), n.train, scope, loop);
  }
  Scope scope;
  Executor().RunProgram(n.startup, scope);
  EXPECT_EQ(LoadCheckpoint(ckpt, n.train, &scope).loop.step, 7);
  EXPECT_EQ(scope.GetVar(n.step)->Get().data<float>()[0], 7.f);
  const Steps rest = Train(n, jitted, jit_.registry(), scope, 7, kSteps);
  EXPECT_EQ(rest.lrs, std::vector<float>(whole.lrs.begin() + 7, whole.lrs.end()));
  EXPECT_EQ(rest.steps, std::vector<float>(whole.steps.begin() + 7, whole.steps.end()));
  EXPECT_EQ(rest.losses, std::vector<float>(whole.losses.begin() + 7, whole.losses.end()));
  for (const auto& [p, want] : whole.params) EXPECT_EQ(test::CompareTensors(rest.params.at(p), want, 0, 0), "") << p;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
