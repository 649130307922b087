// jit_launch and memory: a dying input (donatable) whose buffer the launch
// owns holds the cluster's temps; one whose buffer someone else shares is
// kept and not scribbled on; training the small transformer with the JIT
// (inputs donated inside the launches) gives the losses it gives without;
// jit_launch's shape-only inputs (NoNeedBufferVars); a value a cluster reads
// for its shape alone and never stores, in both launch modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "framework/data/synthetic.h"
#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/program_io.h"
#include "launch_op/jit_launch_op.h"
#include "tests/jit_memory_test_util.h"
#include "tests/memory_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::BitDiff;
using test::Copy;
using JitLaunchMemoryTest = test::JitMemoryTest;

TEST_F(JitLaunchMemoryTest, TransformerTrainsAsWithoutTheJitWithInputsDonated) {
  const test::TinyTransformer tt(jit_);
  const TransformerConfig& tc = tt.config;
  const Model& m = tt.model;
  const proto::ProgramDesc& p = tt.jitted;
  ASSERT_GE(tt.report.clusters.size(), 2u) << tt.report.ToString();
  // A few training steps give the same losses as the program without the JIT.
  const Dataset data = MakeSyntheticSequences(24, tc.seq_len, tc.d_model, tc.classes, 9);
  auto losses = [&](const proto::ProgramDesc& program) {
    Scope scope;
    Executor().RunProgram(m.startup, scope);
    Executor exec = jit_.executor();
    auto plan = exec.Prepare(program, 0, {m.loss});
    std::vector<float> out;
    for (int s = 0; s < 3; ++s) {
      const Dataset b = SliceRows(data, s * 8, (s + 1) * 8);
      FeedTensor(program.blocks(0), scope, m.features, b.features);
      FeedTensor(program.blocks(0), scope, m.labels, b.labels);
      exec.Run(*plan, scope);
      out.push_back(scope.GetVar(m.loss)->Get().data<float>()[0]);
    }
    return out;
  };
  const std::vector<float> off = losses(m.train);
  const std::vector<float> on = losses(p);
  ASSERT_EQ(off.size(), on.size());
  for (size_t i = 0; i < off.size(); ++i) EXPECT_NEAR(on[i], off[i], 1e-4f * std::max(1.0f, off[i])) << "step " << i;
  const jit::LaunchStats stats = jit_->stats().launch;
  EXPECT_GT(stats.launches, 0);
  EXPECT_EQ(stats.framework_fallbacks, 0);
  // The backward cluster's dying inputs (activations, softmax_0, ...) hold its temps.
  EXPECT_GT(stats.inputs_donated, 0);
}

// A dying input whose buffer someone else holds is not donated, and not written.
TEST_F(JitLaunchMemoryTest, SharedDyingInputIsKeptAndNotScribbled) {
  const int64_t batch = 6, classes = 40, hidden = 16;
  const proto::ProgramDesc program = test::DonorProgram(false, batch, classes, hidden);
  BuildJitPassOptions po;
  po.keep_vars = {"logits", "labels", "out"};
  po.deny_ops = {"softmax_with_cross_entropy"};  // sm comes from outside
  BuildJitReport report;
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(program, po, &report);
  ASSERT_EQ(report.clusters.size(), 1u);
  ASSERT_EQ(report.clusters[0].donatable_inputs, std::vector<std::string>{"sm"}) << report.ToString();

  std::mt19937 rng(6);
  const Tensor logits = test::RandomTensor({batch, classes}, DataType::kFP32, rng, -2, 2);
  std::vector<int64_t> label_values;
  for (int64_t i = 0; i < batch; ++i) label_values.push_back(static_cast<int64_t>(rng() % classes));
  const Tensor labels = test::Int64Tensor({batch, 1}, label_values);
  const Tensor w = test::RandomTensor({classes, hidden}, DataType::kFP32, rng, -0.5, 0.5);

  // held: a tensor the test keeps that shares sm's buffer (nullptr: not shared).
  auto run = [&](const proto::ProgramDesc& p, Tensor* held, Tensor* sm_ref) {
    Scope scope;
    scope.Var("w")->GetMutable()->CopyFrom(w);
    FeedTensor(p.blocks(0), scope, "logits", logits);
    FeedTensor(p.blocks(0), scope, "labels", labels);
    if (held != nullptr) {
      *held = Tensor(DataType::kFP32, {batch, classes});
      std::fill(held->mutable_data<float>(), held->mutable_data<float>() + held->numel(), -1.0f);
      scope.Var("sm")->GetMutable()->ShareBufferWith(*held);
      EXPECT_EQ(held->use_count(), 2);
    }
    Executor exec = jit_.executor();
    std::set<std::string> keep = {"out"};
    if (sm_ref != nullptr) keep.insert("sm");
    auto plan = exec.Prepare(p, 0, keep);
    exec.Run(*plan, scope);
    if (sm_ref != nullptr) *sm_ref = Copy(scope.GetVar("sm")->Get());
    return Copy(scope.GetVar("out")->Get());
  };

  Tensor sm_ref;
  const Tensor want = run(program, nullptr, &sm_ref);  // JIT off, sm kept

  jit_->launch().ResetCounters();
  Tensor held;
  const Tensor shared = run(jitted, &held, nullptr);
  jit::LaunchStats stats = jit_->stats().launch;
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(stats.inputs_kept, 1) << "sm's buffer is shared with the test's tensor";
  EXPECT_EQ(stats.inputs_donated, 0);
  EXPECT_EQ(held.use_count(), 1) << "the executor freed sm after its last use";
  EXPECT_EQ(BitDiff(held, sm_ref), "") << "the shared buffer holds softmax_with_cross_entropy's output, untouched";
  EXPECT_EQ(test::CompareTensors(shared, want, 1e-5, 1e-4), "");

  jit_->launch().ResetCounters();
  const Tensor alone = run(jitted, nullptr, nullptr);
  stats = jit_->stats().launch;
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(stats.inputs_donated, 1) << "sm alone owns its buffer: donated";
  EXPECT_EQ(stats.inputs_kept, 0);
  EXPECT_EQ(BitDiff(alone, shared), "");
}


// relu(z) -> y feeds reduce_mean (one generated kernel, so y is never stored)
// and reduce_mean_grad, which reads y for its dims alone (its Out@GRAD comes
// from a framework op, mean, so it is a group of its own). The gradient's
// group cannot be laid out (dy + w alternates broadcast in six dims) and
// falls back to framework kernels, so reduce_mean_grad runs its framework
// kernel on a y that no instruction writes: a dims-only buffer, which both
// launch modes bind without memory (until this case, the executor launch
// mode's jit_kernel op failed: "holds no data").
TEST_F(JitLaunchMemoryTest, AValueReadForItsShapeAloneNeedsNoWriterInEitherLaunchMode) {
  const proto::ProgramDesc program = ParseProgramText(R"pb(
    blocks { idx: 0 parent_idx: -1
      vars { name: "z" dtype: FP32 dims: 2 dims: 3 dims: 2 dims: 3 dims: 2 dims: 3 }
      vars { name: "y" dtype: FP32 dims: 2 dims: 3 dims: 2 dims: 3 dims: 2 dims: 3 }
      vars { name: "m" dtype: FP32 dims: 1 } vars { name: "dm" dtype: FP32 dims: 1 }
      vars { name: "dy" dtype: FP32 dims: 2 dims: 3 dims: 2 dims: 3 dims: 2 dims: 3 }
      vars { name: "w" dtype: FP32 dims: 2 dims: 1 dims: 2 dims: 1 dims: 2 dims: 1 }
      vars { name: "s" dtype: FP32 dims: 2 dims: 3 dims: 2 dims: 3 dims: 2 dims: 3 }
      ops { type: "relu" inputs { name: "X" args: "z" } outputs { name: "Out" args: "y" } }
      ops { type: "reduce_mean" inputs { name: "X" args: "y" } outputs { name: "Out" args: "m" }
            attrs { name: "reduce_all" type: BOOL b: true } }
      ops { type: "mean" inputs { name: "X" args: "m" } outputs { name: "Out" args: "dm" } }
      ops { type: "reduce_mean_grad" inputs { name: "X" args: "y" } inputs { name: "Out@GRAD" args: "dm" }
            outputs { name: "X@GRAD" args: "dy" } attrs { name: "reduce_all" type: BOOL b: true } }
      ops { type: "elementwise_add" inputs { name: "X" args: "dy" } inputs { name: "Y" args: "w" }
            outputs { name: "Out" args: "s" } } })pb");
  BuildJitPassOptions po;
  po.keep_vars = {"z", "w", "m", "s"};
  po.min_cluster_size = 1;
  BuildJitReport report;
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(program, po, &report);
  ASSERT_EQ(report.clusters.size(), 1u) << report.ToString();
  ASSERT_EQ(jitted.blocks(0).ops_size(), 1) << jitted.DebugString();

  std::mt19937 rng(8);
  const std::map<std::string, Tensor> feeds = {
      {"z", test::RandomTensor({2, 3, 2, 3, 2, 3}, DataType::kFP32, rng, -1, 1)},
      {"w", test::RandomTensor({2, 1, 2, 1, 2, 1}, DataType::kFP32, rng, -1, 1)}};
  auto run = [&](const proto::ProgramDesc& p) {
    Scope scope;
    for (const auto& [name, t] : feeds) FeedTensor(p.blocks(0), scope, name, t);
    Executor exec = jit_.executor();
    auto plan = exec.Prepare(p, 0, {"m", "s"});
    exec.Run(*plan, scope);
    return std::make_pair(Copy(scope.GetVar("m")->Get()), Copy(scope.GetVar("s")->Get()));
  };
  const auto want = run(program);
  for (jit::LaunchMode mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit_->SetLaunchMode(mode);
    const auto got = run(jitted);
    EXPECT_EQ(test::CompareTensors(got.first, want.first, 1e-6, 1e-5), "");
    EXPECT_EQ(test::CompareTensors(got.second, want.second, 1e-6, 1e-5), "");
  }
  // The case is the one described: y is a dims-only buffer.
  const auto objects = jit_->cache().CachedObjects();
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(objects[0]->unit_fallbacks.size(), 1u) << objects[0]->lowering;
  bool y_dims_only = false;
  for (const auto& b : objects[0]->program.plan.buffers) y_dims_only = y_dims_only || (b.name == "y" && b.dims_only);
  EXPECT_TRUE(y_dims_only) << objects[0]->Listing();
}

// jit_launch: its attr names the shape-only inputs; one it also writes is not.
TEST_F(JitLaunchMemoryTest, NoNeedBufferVarsAreTheShapeOnlyInputsItDoesNotWrite) {
  const OpRegistry& r = jit_.registry();
  const OpInfo& launch = r.Get("jit_launch");
  auto launch_op = [](const std::vector<std::string>& in, const std::vector<std::string>& out,
                      const std::vector<std::string>& shape_only) {
    OpBuilder b("jit_launch");
    b.In("X", in).Out("Out", out).Attr("compilation_key", std::string("k"));
    if (!shape_only.empty()) b.Attr("shape_only_inputs", shape_only);
    return b.Build();
  };
  EXPECT_EQ(NoNeedBufferVars(launch, launch_op({"a", "b"}, {"c"}, {"a"})), std::set<std::string>{"a"});
  EXPECT_EQ(NoNeedBufferVars(launch, launch_op({"a", "b"}, {"c"}, {})), std::set<std::string>{});
  EXPECT_EQ(NoNeedBufferVars(launch, launch_op({"a", "b"}, {"a"}, {"a", "b"})), std::set<std::string>{"b"});
}

}  // namespace
}  // namespace kiln
