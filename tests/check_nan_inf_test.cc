// --check_nan_inf: a NaN/Inf in a feed or a parameter is named before any op
// reads it; inside a JIT cluster the error names the cluster's own op and var
// (in both launch modes, and when the cluster runs its framework ops), not
// just jit_launch.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "framework/executor.h"
#include "framework/program_io.h"
#include "launch_op/jit_launch_op.h"
#include "tests/test_jit.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

// Each test has a JIT of its own (test::TestJit).
class CheckNanInfTest : public ::testing::Test {
 protected:
  test::TestJit jit_;
};

// x / y -> relu -> scale: a zero in y makes an Inf that the JIT cluster
// carries to its output.
proto::ProgramDesc DivReluScale() {
  return ParseProgramText(R"pb(
    blocks { idx: 0 parent_idx: -1
      vars { name: "x" dtype: FP32 dims: 3 dims: 17 } vars { name: "y" dtype: FP32 dims: 3 dims: 17 }
      vars { name: "q" dtype: FP32 dims: 3 dims: 17 } vars { name: "r" dtype: FP32 dims: 3 dims: 17 }
      vars { name: "out" dtype: FP32 dims: 3 dims: 17 }
      ops { type: "elementwise_div" inputs { name: "X" args: "x" } inputs { name: "Y" args: "y" }
            outputs { name: "Out" args: "q" } }
      ops { type: "relu" inputs { name: "X" args: "q" } outputs { name: "Out" args: "r" } }
      ops { type: "scale" inputs { name: "X" args: "r" } outputs { name: "Out" args: "out" }
            attrs { name: "scale" type: FLOAT f: 2 } } })pb");
}

std::string RunChecked(const proto::ProgramDesc& p, const Tensor& x, const Tensor& y,
                       const OpRegistry& registry = OpRegistry::Global()) {
  Scope scope;
  FeedTensor(p.blocks(0), scope, "x", x);
  FeedTensor(p.blocks(0), scope, "y", y);
  ExecutorOptions o;
  o.check_nan_inf = true;
  Executor exec(o, registry);
  auto plan = exec.Prepare(p, 0, {"out"});
  return test::ErrorOf([&] { exec.Run(*plan, scope); });
}

Tensor Filled(float v) {
  Tensor t(DataType::kFP32, {3, 17});
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = v;
  return t;
}

TEST_F(CheckNanInfTest, AFeedHoldingNaNIsNamedBeforeAnyOpReadsIt) {
  Tensor x = Filled(1.0f);
  x.mutable_data<float>()[20] = std::numeric_limits<float>::quiet_NaN();
  const std::string e = RunChecked(DivReluScale(), x, Filled(2.0f));
  EXPECT_NE(e.find("var 'x' f32[3,17] holds NaN at flat index 20 before this program wrote it"), std::string::npos)
      << e;
  EXPECT_NE(e.find("read by op #0 'elementwise_div'"), std::string::npos) << e;
}

TEST_F(CheckNanInfTest, InsideAClusterTheErrorNamesTheClustersOpAndVar) {
  BuildJitPassOptions options;
  options.keep_vars = {"x", "y", "out"};
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(DivReluScale(), options);
  ASSERT_EQ(jitted.blocks(0).ops_size(), 1) << jitted.DebugString();
  Tensor y = Filled(2.0f);
  y.mutable_data<float>()[7] = 0.0f;
  for (jit::LaunchMode mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    jit_->SetLaunchMode(mode);
    const std::string e = RunChecked(jitted, Filled(1.0f), y, jit_.registry());
    EXPECT_NE(e.find("--check_nan_inf: in JIT cluster"), std::string::npos) << e;
    EXPECT_NE(e.find("wrote +Inf to var '"), std::string::npos) << e;
    EXPECT_NE(e.find("at flat index 7"), std::string::npos) << e;
    EXPECT_NE(e.find("(kernel "), std::string::npos) << e;
  }
  // The cluster denied: its framework ops run, and the first one is named.
  jit::JitOptions denied = jit_->options();
  for (const auto& a : jitted.blocks(0).ops(0).attrs()) {
    if (a.name() == "compilation_key") denied.deny_clusters = {a.s()};
  }
  jit_->Configure(denied);
  const std::string e = RunChecked(jitted, Filled(1.0f), y, jit_.registry());
  EXPECT_NE(e.find("op #0 'elementwise_div' wrote +Inf to output Out (var 'q' f32[3,17]) at flat index 7"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace kiln
