// jit_launch and memory: a dying input (donatable) whose buffer the launch
// owns holds the cluster's temps; one whose buffer someone else shares is
// kept and not scribbled on; training the small transformer with the JIT
// (inputs donated inside the launches) gives the losses it gives without;
// jit_launch's shape-only inputs (NoNeedBufferVars).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/jit_compiler.h"
#include "framework/data/synthetic.h"
#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "launch_op/jit_launch_op.h"
#include "tests/jit_memory_test_util.h"
#include "tests/jit_pipeline_util.h"
#include "tests/memory_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::BitDiff;
using test::Copy;
using JitLaunchMemoryTest = test::JitMemoryTest;

TEST_F(JitLaunchMemoryTest, TransformerTrainsAsWithoutTheJitWithInputsDonated) {
  const test::TinyTransformer tt;
  const TransformerConfig& tc = tt.config;
  const Model& m = tt.model;
  const proto::ProgramDesc& p = tt.jitted;
  ASSERT_GE(tt.report.clusters.size(), 2u) << tt.report.ToString();
  // A few training steps give the same losses as the program without the JIT.
  const Dataset data = MakeSyntheticSequences(24, tc.seq_len, tc.d_model, tc.classes, 9);
  auto losses = [&](const proto::ProgramDesc& program) {
    Scope scope;
    Executor().RunProgram(m.startup, scope);
    Executor exec;
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
  const jit::LaunchStats stats = jit::GetLaunchStats();
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
  const proto::ProgramDesc jitted = test::ApplyBuildJit(program, po, &report);
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
    Executor exec;
    std::set<std::string> keep = {"out"};
    if (sm_ref != nullptr) keep.insert("sm");
    auto plan = exec.Prepare(p, 0, keep);
    exec.Run(*plan, scope);
    if (sm_ref != nullptr) *sm_ref = Copy(scope.GetVar("sm")->Get());
    return Copy(scope.GetVar("out")->Get());
  };

  Tensor sm_ref;
  const Tensor want = run(program, nullptr, &sm_ref);  // JIT off, sm kept

  jit::ResetLaunchStats();
  Tensor held;
  const Tensor shared = run(jitted, &held, nullptr);
  jit::LaunchStats stats = jit::GetLaunchStats();
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(stats.inputs_kept, 1) << "sm's buffer is shared with the test's tensor";
  EXPECT_EQ(stats.inputs_donated, 0);
  EXPECT_EQ(held.use_count(), 1) << "the executor freed sm after its last use";
  EXPECT_EQ(BitDiff(held, sm_ref), "") << "the shared buffer holds softmax_with_cross_entropy's output, untouched";
  EXPECT_EQ(test::CompareTensors(shared, want, 1e-5, 1e-4), "");

  jit::ResetLaunchStats();
  const Tensor alone = run(jitted, nullptr, nullptr);
  stats = jit::GetLaunchStats();
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(stats.inputs_donated, 1) << "sm alone owns its buffer: donated";
  EXPECT_EQ(stats.inputs_kept, 0);
  EXPECT_EQ(BitDiff(alone, shared), "");
}


// jit_launch: its attr names the shape-only inputs; one it also writes is not.
TEST_F(JitLaunchMemoryTest, NoNeedBufferVarsAreTheShapeOnlyInputsItDoesNotWrite) {
  const OpRegistry& r = OpRegistry::Global();
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
