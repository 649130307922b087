// The JIT against the reference kernels, op by op: every elementwise op the
// lowering turns into generated code and its grad, at sizes around the vector
// width and broadcast shapes, on both ISA paths; and a check that every
// lowerable op has a case here or in another file's JIT test.
//
// Each case is a small list of ops with FP32 inputs (tests/jit_ops_test_util.h).
// It runs once through the reference kernels (the oracle) and once per ISA
// through jit::Lower and the runtime::Runner, the way jit_launch runs a
// cluster, and every requested output must agree. Optimizers:
// jit_optimizer_ops_test; fused chains and framework ops in clusters:
// jit_fused_chains_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/compile_cache.h"
#include "compiler/lower.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "runtime/runner.h"
#include "tests/op_test_util.h"
#include "tests/jit_ops_test_util.h"

namespace kiln {
namespace {

using namespace jit_ops_test;  // the helpers shared by the split files (tests/jit_ops_test_util.h)

TEST(JitOpsTest, BinaryForward) {
  std::mt19937 rng(1);
  for (const std::string& type : kBinaryOps) {
    for (int64_t n : kSizes) {
      for (const BinaryShape& s : BinaryShapes(n)) {
        Cluster c;
        c.ops = {BinaryOp(type, s.axis)};
        c.inputs = BinaryInputs(type, s, rng);
        c.outputs = {"out"};
        CheckCluster(type + " " + s.name + " " + SizeName(n), c, kOneGeneratedKernel);
      }
    }
  }
}

TEST(JitOpsTest, BinaryGradBothOutputs) {
  std::mt19937 rng(2);
  for (const std::string& type : kBinaryOps) {
    for (int64_t n : kSizes) {
      for (const BinaryShape& s : BinaryShapes(n)) {
        Cluster c;
        c.ops = {GradOf(BinaryOp(type, s.axis), {GradVarName("x"), GradVarName("y")})};
        c.inputs = BinaryInputs(type, s, rng);
        c.outputs = {GradVarName("x"), GradVarName("y")};
        // Y@GRAD sums Numel(X)/Numel(Y) terms: dout for add/sub, dout*x for
        // mul, dout*x/y^2 (|y| >= 0.5) for div.
        const double term = type == "elementwise_div" ? 36.0 : type == "elementwise_mul" ? 9.0 : 3.0;
        c.output_tol[GradVarName("y")] = SumTol(Numel(s.x) / Numel(s.y), term);
        CheckCluster(type + "_grad " + s.name + " " + SizeName(n), c, kOneGeneratedKernel);
      }
    }
  }
}

TEST(JitOpsTest, BinaryGradOneOutput) {
  std::mt19937 rng(3);
  for (const std::string& type : kBinaryOps) {
    for (const BinaryShape& s : BinaryShapes(17)) {
      for (const char* wrt : {"x", "y"}) {
        Cluster c;
        c.ops = {GradOf(BinaryOp(type, s.axis), {GradVarName(wrt)})};
        c.inputs = BinaryInputs(type, s, rng);
        c.outputs = {GradVarName(wrt)};
        const double term = type == "elementwise_div" ? 36.0 : type == "elementwise_mul" ? 9.0 : 3.0;
        c.output_tol[GradVarName("y")] = SumTol(Numel(s.x) / Numel(s.y), term);
        CheckCluster(type + "_grad " + s.name + " only " + GradVarName(wrt), c, kOneGeneratedKernel);
      }
    }
  }
}

// ---- unary ops ------------------------------------------------------------------------

struct UnaryCase {
  std::string name;
  proto::OpDesc op;  // forward, X=x Out=out
  double lo, hi;     // range of X
  Tol tol;
};

std::vector<UnaryCase> UnaryCases() {
  auto op = [](const std::string& type) { return OpBuilder(type).In("X", {"x"}).Out("Out", {"out"}); };
  return {
      {"relu", op("relu").Build(), -3, 3, kExact},
      {"tanh", op("tanh").Build(), -3, 3, kTranscendental},
      {"sigmoid", op("sigmoid").Build(), -3, 3, kTranscendental},
      {"exp", op("exp").Build(), -10, 10, kTranscendental},
      {"gelu", op("gelu").Attr("approximate", false).Build(), -3, 3, kTranscendental},
      {"gelu approximate", op("gelu").Attr("approximate", true).Build(), -3, 3, kTranscendental},
      {"scale bias after", op("scale").Attr("scale", 1.75f).Attr("bias", -0.5f).Attr("bias_after_scale", true).Build(),
       -3, 3, kExact},
      {"scale bias before",
       op("scale").Attr("scale", -2.5f).Attr("bias", 0.25f).Attr("bias_after_scale", false).Build(), -3, 3, kExact},
      // Bounds inside the range of X: both clamps and the pass-through band
      // are hit (NaN, infinities and X exactly at a bound: jit_clip_softmax_test).
      {"clip", op("clip").Attr("min", -1.25f).Attr("max", 2.0f).Build(), -3, 3, kExact},
  };
}

TEST(JitOpsTest, UnaryForward) {
  std::mt19937 rng(4);
  for (const UnaryCase& u : UnaryCases()) {
    for (int64_t n : kSizes) {
      Cluster c;
      c.ops = {u.op};
      c.inputs["x"] = Uniform({n}, rng, u.lo, u.hi);
      c.outputs = {"out"};
      c.tol = u.tol;
      CheckCluster(u.name + " " + SizeName(n), c, kOneGeneratedKernel);
    }
  }
}

TEST(JitOpsTest, UnaryGrad) {
  std::mt19937 rng(5);
  for (const UnaryCase& u : UnaryCases()) {
    for (int64_t n : kSizes) {
      Cluster c;
      c.ops = {GradOf(u.op, {GradVarName("x")})};
      c.inputs["x"] = Uniform({n}, rng, u.lo, u.hi);
      // The grads read Out (X for gelu, nothing for scale): relu's Out is kept
      // away from 0, where its grad jumps; the others get Out of the forward op.
      if (u.op.type() == "relu") {
        c.inputs["out"] = AwayFromZero({n}, rng, 0.1, 3.0);
      } else {
        c.inputs["out"] = Copy(test::RunOp(u.op, {{"x", c.inputs["x"]}})->GetVar("out")->Get());
      }
      c.inputs[GradVarName("out")] = Uniform({n}, rng);
      c.outputs = {GradVarName("x")};
      c.tol = u.tol;
      CheckCluster(u.name + "_grad " + SizeName(n), c, kOneGeneratedKernel);
    }
  }
}

// Every op the registry marks as lowerable to generated code has a case above.
TEST(JitOpsTest, EveryLowerableOpIsCovered) {
  std::set<std::string> covered = {"sgd", "momentum", "adam", "adamw"};
  for (const std::string& t : kBinaryOps) covered.insert({t, t + "_grad"});
  for (const UnaryCase& u : UnaryCases()) covered.insert({u.op.type(), u.op.type() + "_grad"});
  covered.insert("dropout_grad");  // DropoutGradTest.JitMatchesReferenceOnBothIsas (dropout_op_test.cc)
  covered.insert({"reduce_sum", "reduce_sum_grad", "reduce_mean", "reduce_mean_grad"});  // ReduceSumAndMean...
  // MathOpsJitTest, SigmoidCeJitTest, WhereJitTest, CompareJitTest and CastJitTest, in the ops' own tests.
  for (const std::string t : {"log", "sqrt", "rsqrt", "abs", "pow", "leaky_relu", "softplus", "where",
                              "sigmoid_cross_entropy_with_logits"}) {
    covered.insert({t, t + "_grad"});
  }
  covered.insert({"less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal", "cast"});
  // UnaryMathOpsJitTest, OnnxActivationOpsJitTest, TrigOpsJitTest and LogicalOpsJitTest (issue 28's ops).
  for (const std::string t : {"erf", "floor", "ceil", "round", "sign", "reciprocal", "softsign", "elu", "selu", "celu",
                              "hard_sigmoid", "hard_swish", "thresholded_relu"}) {
    covered.insert({t, t + "_grad"});
  }
  for (const std::string t : {"tan", "asin", "acos", "atan", "asinh", "acosh", "atanh"}) covered.insert(t + "_grad");
  covered.insert({"logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf"});
  // BinaryOpsJitTest and ElementwisePowOpJitTest.
  for (const std::string t : {"elementwise_max", "elementwise_min", "elementwise_pow"}) covered.insert({t, t + "_grad"});
  covered.insert({"expand_v2", "expand_v2_grad"});  // TileExpandOpsJitTest
  covered.insert({"reduce_l1", "reduce_l1_grad", "reduce_l2_grad", "logsumexp_grad"});  // ReduceNormOpsJitTest
  covered.insert({"prelu", "prelu_grad"});  // PreluOpJitTest
  covered.insert("grad_merge");  // GradMergeJitTest (grad_merge_ops_test.cc), fused with each gated update too
  std::set<std::string> lowerable;
  for (const std::string& t : OpRegistry::Global().Types()) {
    const JitLowering j = OpRegistry::Global().Get(t).jit;
    if (j == JitLowering::kElementwise || j == JitLowering::kOptimizer || OpRegistry::Global().Get(t).elementwise) {
      lowerable.insert(t);
    }
  }
  EXPECT_EQ(lowerable, covered);
}

}  // namespace
}  // namespace kiln
