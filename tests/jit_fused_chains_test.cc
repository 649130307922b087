// The JIT against the reference kernels on clusters of many ops: long fused
// chains forward and backward, in-place updates, spaces split over threads,
// framework ops inside a cluster, reductions, and a cluster part of which
// cannot be compiled.
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

// ---- long fused chains ----------------------------------------------------------------

proto::OpDesc Binary(const std::string& type, const std::string& x, const std::string& y, const std::string& out) {
  return OpBuilder(type).In("X", {x}).In("Y", {y}).Out("Out", {out}).Build();
}
proto::OpDesc Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out}).Build();
}
proto::OpDesc ScaleOp(const std::string& x, const std::string& out, float scale, float bias, bool after) {
  return OpBuilder("scale")
      .In("X", {x})
      .Out("Out", {out})
      .Attr("scale", scale)
      .Attr("bias", bias)
      .Attr("bias_after_scale", after)
      .Build();
}
proto::OpDesc Gelu(const std::string& x, const std::string& out, bool approximate) {
  return OpBuilder("gelu").In("X", {x}).Out("Out", {out}).Attr("approximate", approximate).Build();
}

// 20 forward ops over x [3,n] with a bias b [n] broadcast twice; every
// intermediate stays bounded (exp reads a sigmoid, div divides by an exp).
TEST(JitOpsTest, TwentyOpForwardChainIsOneKernel) {
  std::mt19937 rng(9);
  for (int64_t n : {int64_t{1000}, int64_t{4099}}) {
    Cluster c;
    c.ops = {
        Binary("elementwise_add", "x", "b", "t1"),
        Unary("relu", "t1", "t2"),
        Binary("elementwise_mul", "t2", "w", "t3"),
        Unary("tanh", "t3", "t4"),
        ScaleOp("t4", "t5", 2.0f, 0.5f, true),
        Gelu("t5", "t6", false),
        Unary("sigmoid", "t6", "t7"),
        Binary("elementwise_sub", "t7", "t3", "t8"),
        Unary("exp", "t7", "t9"),
        Binary("elementwise_div", "t8", "t9", "t10"),
        Gelu("t10", "t11", true),
        ScaleOp("t11", "t12", -1.5f, 0.25f, false),
        Binary("elementwise_mul", "t12", "t4", "t13"),
        Binary("elementwise_add", "t13", "b", "t14"),
        Unary("tanh", "t14", "t15"),
        Unary("relu", "t15", "t16"),
        Binary("elementwise_add", "t16", "t2", "t17"),
        Unary("sigmoid", "t17", "t18"),
        Binary("elementwise_mul", "t18", "x", "t19"),
        Binary("elementwise_sub", "t19", "t5", "out"),
    };
    c.inputs = {{"x", Uniform({3, n}, rng)}, {"b", Uniform({n}, rng)}, {"w", Uniform({3, n}, rng)}};
    // An intermediate that is also an output leaves the kernel as well.
    c.outputs = {"out", "t10"};
    c.tol = kTranscendental;
    CheckCluster("20-op chain " + SizeName(n), c, kOneGeneratedKernel);
  }
}

// h = x*w, g = gelu(h), o = g + b and their grads, with w and b [n]
// broadcast over x [2,n]: one iteration space, so one kernel that also sums
// w@GRAD and b@GRAD over the rows.
TEST(JitOpsTest, ForwardAndBackwardChainIsOneKernel) {
  std::mt19937 rng(10);
  for (int64_t n : {int64_t{1000}, int64_t{4099}}) {
    const proto::OpDesc mul = Binary("elementwise_mul", "x", "w", "h");
    const proto::OpDesc gelu = Gelu("h", "g", false);
    const proto::OpDesc add = Binary("elementwise_add", "g", "b", "o");
    Cluster c;
    c.ops = {mul,
             gelu,
             add,
             GradOf(add, {GradVarName("g"), GradVarName("b")}),
             GradOf(gelu, {GradVarName("h")}),
             GradOf(mul, {GradVarName("x"), GradVarName("w")})};
    c.inputs = {{"x", Uniform({2, n}, rng)},
                {"w", Uniform({n}, rng)},
                {"b", Uniform({n}, rng)},
                {GradVarName("o"), Uniform({2, n}, rng)}};
    c.outputs = {"o", GradVarName("x"), GradVarName("w"), GradVarName("b")};
    c.tol = kTranscendental;
    CheckCluster("mul-gelu-add forward and backward " + SizeName(n), c, kOneGeneratedKernel);
  }
}

// An input updated in place through a chain (x = x + y; x = relu(x)) and
// read afterwards: x is both an input and an output (aliased), the kernel
// reads it and writes it back.
TEST(JitOpsTest, InPlaceChainOnAnInput) {
  std::mt19937 rng(15);
  for (int64_t n : kSizes) {
    Cluster c;
    c.ops = {Binary("elementwise_add", "x", "y", "x"), Unary("relu", "x", "x"), ScaleOp("x", "out", 0.5f, 1.0f, true)};
    c.inputs = {{"x", Uniform({3, n}, rng)}, {"y", Uniform({n}, rng)}};
    c.outputs = {"x", "out"};
    CheckCluster("x += y, x = relu(x), out = scale(x) " + SizeName(n), c, kOneGeneratedKernel);
  }
}

// Spaces above FusedElementwiseKernel::kParallelMinElements run on several
// threads; reduction outputs then sum per-thread partials.
TEST(JitOpsTest, LargeSpacesSplitOverThreads) {
  std::mt19937 rng(16);
  const int64_t big = 2 * jit::FusedElementwiseKernel::kParallelMinElements + 13;
  const std::vector<BinaryShape> shapes = {{"X[big] Y[1]", {big}, {1}, -1},
                                           {"X[4,big/4] Y[big/4]", {4, big / 4}, {big / 4}, -1},
                                           {"X[big/7,7] Y[big/7,1]", {big / 7, 7}, {big / 7, 1}, -1}};
  for (const BinaryShape& s : shapes) {
    for (const std::string& type : {std::string("elementwise_mul"), std::string("elementwise_sub")}) {
      Cluster c;
      const proto::OpDesc fwd = BinaryOp(type, s.axis);
      c.ops = {fwd, GradOf(fwd, {GradVarName("x"), GradVarName("y")})};
      c.inputs = BinaryInputs(type, s, rng);
      c.outputs = {"out", GradVarName("x"), GradVarName("y")};
      c.output_tol[GradVarName("y")] = SumTol(Numel(s.x) / Numel(s.y), type == "elementwise_mul" ? 9.0 : 3.0);
      CheckCluster(type + " and grad " + s.name, c, kOneGeneratedKernel);
    }
  }
}

// A whole training step of r = relu(x*w + b): forward, backward and sgd on
// w and b, which the forward reads. The [4,n] space is one kernel, the [n]
// parameter updates (after the forward has read w and b) another.
TEST(JitOpsTest, TrainingStepWithInPlaceSgd) {
  std::mt19937 rng(17);
  for (int64_t n : {int64_t{17}, int64_t{1000}}) {
    const proto::OpDesc mul = Binary("elementwise_mul", "x", "w", "h");
    const proto::OpDesc add = Binary("elementwise_add", "h", "b", "o");
    const proto::OpDesc relu = Unary("relu", "o", "r");
    auto sgd = [](const std::string& p) {
      return OpBuilder("sgd")
          .In("Param", {p})
          .In("Grad", {GradVarName(p)})
          .In("LearningRate", {"lr"})
          .Out("ParamOut", {p})
          .Build();
    };
    Cluster c;
    c.ops = {mul,
             add,
             relu,
             GradOf(relu, {GradVarName("o")}),
             GradOf(add, {GradVarName("h"), GradVarName("b")}),
             GradOf(mul, {GradVarName("w")}),
             sgd("w"),
             sgd("b")};
    c.inputs = {{"x", Uniform({4, n}, rng)},
                {"w", Uniform({n}, rng)},
                {"b", Uniform({n}, rng)},
                {GradVarName("r"), Uniform({4, n}, rng)},
                {"lr", Scalar(0.01f)}};
    c.outputs = {"r", "w", "b"};
    CheckCluster("training step " + SizeName(n), c, KernelCount{2, 0});
  }
}

// ---- framework ops in a cluster -------------------------------------------------------

// matmul, softmax, reshape2 and reduce_sum run their framework kernels on the
// program's buffers; the elementwise ops between them are generated kernels.
TEST(JitOpsTest, NonElementwiseOpsRunFrameworkKernels) {
  std::mt19937 rng(11);
  Cluster c;
  c.ops = {
      OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"a"}).Build(),
      Binary("elementwise_add", "a", "bias", "b"),
      Unary("relu", "b", "r"),
      OpBuilder("softmax").In("X", {"r"}).Out("Out", {"s"}).Build(),
      OpBuilder("reshape2").In("X", {"s"}).Out("Out", {"e"}).Attr("shape", std::vector<int64_t>{2, 0, -1}).Build(),
      OpBuilder("reduce_sum")
          .In("X", {"e"})
          .Out("Out", {"f"})
          .Attr("dim", std::vector<int64_t>{1})
          .Attr("keep_dim", false)
          .Build(),
      ScaleOp("f", "out", 3.0f, 1.0f, true),
  };
  c.inputs = {{"x", Uniform({6, 33}, rng)}, {"w", Uniform({33, 20}, rng, -0.3, 0.3)}, {"bias", Uniform({20}, rng)}};
  c.outputs = {"s", "out"};
  c.tol = kTranscendental;
  // matmul, softmax and reshape2 on framework kernels; add+relu, reduce_sum
  // and scale generated (the reduction's space differs from scale's).
  CheckCluster("matmul softmax reshape2 reduce_sum", c, KernelCount{3, 3});
}

// ---- reductions -----------------------------------------------------------------------

struct ReduceCase {
  std::string name;
  Dims x;
  std::vector<int64_t> dim;
  bool keep_dim = false;
  bool reduce_all = false;
};

std::vector<ReduceCase> ReduceCases(int64_t n) {
  return {{"[3,n,5] dim 1", {3, n, 5}, {1}},
          {"[n,7] dim -1 keep", {n, 7}, {-1}, true},
          {"[2,n,3] dims 0,2", {2, n, 3}, {0, 2}},
          {"[n,4] all", {n, 4}, {0}, false, true},
          {"[4,3,n] dim 0 keep", {4, 3, n}, {0}, true}};
}

proto::OpDesc ReduceOp(const std::string& type, const ReduceCase& rc) {
  return OpBuilder(type)
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("dim", rc.dim)
      .Attr("keep_dim", rc.keep_dim)
      .Attr("reduce_all", rc.reduce_all)
      .Build();
}

// reduce_sum / reduce_mean and their grads compile to one generated kernel
// each (a reduction output; a broadcast input) and match the reference.
TEST(JitOpsTest, ReduceSumAndMeanForwardAndGrad) {
  std::mt19937 rng(17);
  for (const std::string type : {"reduce_sum", "reduce_mean"}) {
    for (int64_t n : kSizes) {
      for (const ReduceCase& rc : ReduceCases(n)) {
        const proto::OpDesc fwd = ReduceOp(type, rc);
        Cluster c;
        c.ops = {fwd};
        c.inputs = {{"x", Uniform(rc.x, rng)}};
        c.outputs = {"out"};
        c.tol = SumTol(Numel(rc.x), 3.0);
        CheckCluster(type + " " + rc.name + " " + SizeName(n), c, kOneGeneratedKernel);

        Cluster g;
        g.ops = {GradOf(fwd, {GradVarName("x")})};
        auto scope = test::RunOps({fwd}, c.inputs, /*use_onednn=*/false);
        g.inputs = {{"x", c.inputs["x"]}, {GradVarName("out"), Uniform(scope->GetVar("out")->Get().dims(), rng)}};
        g.outputs = {GradVarName("x")};
        CheckCluster(type + "_grad " + rc.name + " " + SizeName(n), g, kOneGeneratedKernel);
      }
    }
  }
}

// 2x2/2 max-pool gradient on kiln's kernel: ties go to the first maximum of
// each window in row-major order, as the reference kernel does; odd widths
// and widths past 16 windows exercise the scalar tail and the vector body.
TEST(JitOpsTest, MaxPool2x2GradMatchesReferenceWithTies) {
  std::mt19937 rng(5);
  for (const Dims& dims : {Dims{2, 3, 4, 6}, Dims{1, 2, 10, 38}, Dims{3, 1, 2, 2}}) {
    Cluster c;
    const auto attrs = [](OpBuilder b) {
      return b.Attr("pooling_type", std::string("max"))
          .Attr("ksize", std::vector<int64_t>{2, 2})
          .Attr("strides", std::vector<int64_t>{2, 2})
          .Build();
    };
    c.ops = {attrs(OpBuilder("pool2d").In("X", {"x"}).Out("Out", {"o"})),
             attrs(OpBuilder("pool2d_grad").In("X", {"x"}).In("Out", {"o"}).In("Out@GRAD", {"g"}).Out("X@GRAD", {"dx"}))};
    // Small integers: many windows hold their maximum twice or more.
    Tensor x(DataType::kFP32, dims);
    float* p = x.mutable_data<float>();
    std::uniform_int_distribution<int> small(0, 2);
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(small(rng));
    c.inputs = {{"x", x}, {"g", Uniform({dims[0], dims[1], dims[2] / 2, dims[3] / 2}, rng)}};
    c.outputs = {"o", "dx"};
    CheckCluster("max-pool grad " + DimsToString(dims), c, KernelCount{0, 2});
  }
}

// An in-place framework op (softmax writes r in place) between two
// elementwise ops: the relu after it must read the softmax's result, not the
// value of r the first group computed.
TEST(JitOpsTest, ElementwiseOpAfterInPlaceFrameworkOpReadsItsResult) {
  std::mt19937 rng(12);
  Cluster c;
  c.ops = {
      Binary("elementwise_add", "x", "y", "r"),
      OpBuilder("softmax").In("X", {"r"}).Out("Out", {"r"}).Build(),
      ScaleOp("r", "out", 2.0f, -0.1f, true),
  };
  c.inputs = {{"x", Uniform({4, 37}, rng)}, {"y", Uniform({37}, rng)}};
  c.outputs = {"out"};
  c.tol = kTranscendental;
  CheckCluster("add, softmax in place, scale", c, KernelCount{2, 1});
}

// ---- a unit that cannot be compiled ----------------------------------------------------

// X [2,3,2,3,2,3] + Y [2,1,2,1,2,1]: the broadcast pattern alternates in
// every dim, so the iteration space collapses to 6 dims, more than generated
// kernels take. That group falls back alone to the framework kernel; the
// relu and scale beside it stay one generated kernel.
TEST(JitOpsTest, AGroupThatCannotBeLaidOutFallsBackAlone) {
  std::mt19937 rng(13);
  Cluster c;
  c.ops = {Binary("elementwise_add", "x", "y", "sum"), Unary("relu", "z", "r"), ScaleOp("r", "s", 2.0f, 1.0f, true)};
  c.inputs = {{"x", Uniform({2, 3, 2, 3, 2, 3}, rng)}, {"y", Uniform({2, 1, 2, 1, 2, 1}, rng)},
              {"z", Uniform({5, 7}, rng)}};
  c.outputs = {"sum", "s"};
  CheckCluster("6-dim broadcast beside a chain", c, KernelCount{1, 1});
  std::unique_ptr<Scope> reference = test::RunOps(c.ops, c.inputs, /*use_onednn=*/false);
  const JitSubgraph sg = MakeSubgraph(c, *reference);
  const jit::ShapeSignature sig = SignatureOf(sg, c.inputs);
  for (Isa isa : TestedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    const auto obj = jit::Lower(JitSubgraphFingerprint(sg), sg, sig, OptionsFor(isa));
    ASSERT_EQ(obj->unit_fallbacks.size(), 1u) << obj->lowering;
    EXPECT_NE(obj->unit_fallbacks[0].find("collapse to 6 dims"), std::string::npos) << obj->lowering;
    EXPECT_NE(obj->lowering.find("#0 elementwise_add -> framework_op"), std::string::npos) << obj->lowering;
    jit::CompileCacheOptions options;
    options.compile = OptionsFor(isa);
    jit::CompileCache compiler(options);
    const std::string key = compiler.AddSubgraph(sg);
    EXPECT_NE(compiler.Compile(key, sig), nullptr);
    EXPECT_EQ(compiler.stats().failures, 0);
    EXPECT_EQ(compiler.stats().compiles, 1);
    EXPECT_EQ(compiler.stats().unit_fallbacks, 1);
  }
}

}  // namespace
}  // namespace kiln
