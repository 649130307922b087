// jit_launch (launch_op/jit_launch_op.h): an input that holds no data (a
// parameter whose startup never ran) is named as the cluster's op that reads
// it reports it without the JIT, with its slot and the cluster, never as
// jit_launch's X; in both launch modes. With the input there, the cluster
// runs and agrees with the program without the JIT.
#include <gtest/gtest.h>

#include <string>

#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/program_io.h"
#include "launch_op/jit_launch_op.h"
#include "tests/test_jit.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

// Each test has a JIT of its own (test::TestJit).
class JitLaunchOpTest : public ::testing::Test {
 protected:
  test::TestJit jit_;
};

// relu(x) = h, then matmul(h, w) = y: the parameter w is read by the
// cluster's op #1, through slot Y.
const char* kProgram = R"pb(
blocks {
  idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP32 dims: 4 dims: 3 }
  vars { name: "w" dtype: FP32 dims: 3 dims: 2 persistable: true }
  vars { name: "h" dtype: FP32 dims: 4 dims: 3 }
  vars { name: "y" dtype: FP32 dims: 4 dims: 2 }
  ops { type: "relu" inputs { name: "X" args: "x" } outputs { name: "Out" args: "h" } }
  ops { type: "matmul" inputs { name: "X" args: "h" } inputs { name: "Y" args: "w" } outputs { name: "Out" args: "y" } }
}
)pb";

proto::ProgramDesc Jitted(test::TestJit& jit, const proto::ProgramDesc& program) {
  BuildJitPassOptions o;
  o.keep_vars = {"x", "w", "y"};
  o.min_cluster_size = 1;
  BuildJitReport report;
  const proto::ProgramDesc jitted = jit.ApplyBuildJit(program, o, &report);
  EXPECT_EQ(report.clusters.size(), 1u) << report.ToString();
  EXPECT_EQ(jitted.blocks(0).ops_size(), 1);
  EXPECT_EQ(jitted.blocks(0).ops(0).type(), "jit_launch");
  return jitted;
}

// The message of running `p` with x fed and, with `with_w`, w set.
std::string ErrorOfRun(const OpRegistry& registry, const proto::ProgramDesc& p, bool with_w, Tensor* y = nullptr) {
  std::mt19937 rng(2);
  Scope scope;
  FeedTensor(p.blocks(0), scope, "x", test::RandomTensor({4, 3}, DataType::kFP32, rng));
  const Tensor w = test::RandomTensor({3, 2}, DataType::kFP32, rng);
  if (with_w) FeedTensor(p.blocks(0), scope, "w", w);
  const std::string e = test::ErrorOf([&] {
    Executor exec({}, registry);
    auto plan = exec.Prepare(p, 0, {"y"});
    exec.Run(*plan, scope);
  });
  if (y != nullptr && with_w) y->CopyFrom(scope.GetVar("y")->Get());
  return e;
}

TEST_F(JitLaunchOpTest, AnInputWithoutDataIsNamedAsTheClustersOpThatReadsIt) {
  const proto::ProgramDesc program = ParseProgramText(kProgram, "relu_matmul");
  const proto::ProgramDesc jitted = Jitted(jit_, program);
  const proto::AttrDesc* key_attr = FindAttr(jitted.blocks(0).ops(0), "compilation_key");
  ASSERT_NE(key_attr, nullptr);
  const std::string key = key_attr->s();
  // Without the JIT: the executor's own message.
  const std::string plain = ErrorOfRun(jit_.registry(), program, false);
  ASSERT_NE(plain.find("op #1 'matmul': input Y ('w') holds no data"), std::string::npos) << plain;
  for (jit::LaunchMode mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit_->SetLaunchMode(mode);
    const std::string e = ErrorOfRun(jit_.registry(), jitted, false);
    EXPECT_EQ(e.rfind("op #1 'matmul': input Y ('w') holds no data: it is read before any op writes it and was not "
                      "fed (a parameter: run its startup program or load a checkpoint first) [op numbers count the "
                      "ops of JIT cluster " + key + "]", 0),
              0u)
        << e;
    EXPECT_EQ(e.find("jit_launch"), std::string::npos) << e;
    EXPECT_EQ(jit_->stats().compiles, 0) << "it failed before compiling";
  }
}

// fill_any_like reads x for its dims only (a shape-only input of the
// launch): x with neither data nor dims is named the same way; x with dims
// and no data runs.
TEST_F(JitLaunchOpTest, AShapeOnlyInputWithoutDimsIsNamedToo) {
  const proto::ProgramDesc program = ParseProgramText(R"pb(
    blocks { idx: 0 parent_idx: -1
      vars { name: "x" dtype: FP32 dims: 4 dims: 3 }
      vars { name: "o" dtype: FP32 dims: 4 dims: 3 }
      vars { name: "y" dtype: FP32 dims: 4 dims: 3 }
      ops { type: "fill_any_like" inputs { name: "X" args: "x" } outputs { name: "Out" args: "o" }
            attrs { name: "value" type: FLOAT f: 2 } }
      ops { type: "relu" inputs { name: "X" args: "o" } outputs { name: "Out" args: "y" } } })pb");
  BuildJitPassOptions o;
  o.keep_vars = {"x", "y"};
  o.min_cluster_size = 1;
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(program, o);
  ASSERT_EQ(jitted.blocks(0).ops_size(), 1) << jitted.DebugString();
  const proto::AttrDesc* shape_only = FindAttr(jitted.blocks(0).ops(0), "shape_only_inputs");
  ASSERT_NE(shape_only, nullptr) << jitted.DebugString();
  ASSERT_EQ(shape_only->strings_size(), 1);
  EXPECT_EQ(shape_only->strings(0), "x");
  for (jit::LaunchMode mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit_->SetLaunchMode(mode);
    Scope scope;
    const std::string e = test::ErrorOf([&] {
      Executor exec = jit_.executor();
      auto plan = exec.Prepare(jitted, 0, {"y"});
      exec.Run(*plan, scope);
    });
    EXPECT_EQ(e.rfind("op #0 'fill_any_like': input X ('x') holds no data", 0), 0u) << e;
    EXPECT_EQ(e.find("jit_launch"), std::string::npos) << e;
    // Dims without data are enough.
    Tensor* x = scope.Var("x")->GetMutable();
    *x = Tensor(DataType::kFP32, {4, 3});
    x->ReleaseBuffer();
    Executor exec = jit_.executor();
    auto plan = exec.Prepare(jitted, 0, {"y"});
    exec.Run(*plan, scope);
    const Tensor& y = scope.GetVar("y")->Get();
    ASSERT_EQ(y.dims(), (Dims{4, 3}));
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(y.data<float>()[i], 2.f) << i;
  }
}

// The check does not fire when the input is there: both launch modes give
// what the program gives without the JIT.
TEST_F(JitLaunchOpTest, AnInputWithDataRunsTheCluster) {
  const proto::ProgramDesc program = ParseProgramText(kProgram, "relu_matmul");
  const proto::ProgramDesc jitted = Jitted(jit_, program);
  Tensor want;
  ASSERT_EQ(ErrorOfRun(jit_.registry(), program, true, &want), "(no error)");
  for (jit::LaunchMode mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit_->SetLaunchMode(mode);
    jit_->launch().ResetCounters();
    Tensor got;
    ASSERT_EQ(ErrorOfRun(jit_.registry(), jitted, true, &got), "(no error)");
    EXPECT_EQ(test::CompareTensors(got, want, 1e-6, 1e-5), "");
    EXPECT_EQ(jit_->stats().launch.launches, 1);
  }
}

}  // namespace
}  // namespace kiln
