// concat, split, slice, clip, log_softmax and fused_softmax_mask_upper_triangle
// inside JIT clusters:
// - clip and clip_grad as generated code on the AVX-512 and AVX2 paths at
//   sizes around both vector widths, with NaN, infinities and values exactly
//   at the bounds (exact agreement with the reference kernels);
// - a small causal-attention program with its backward and sgd steps: every
//   one of these ops joins a cluster (none breaks one apart), clip is fused
//   into a generated kernel, and training steps with the JIT on (both launch
//   modes, both ISAs, with and without oneDNN) give the losses and
//   parameters of the JIT off.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/codegen/isa.h"
#include "framework/backward.h"
#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/validate.h"
#include "launch_op/jit_launch_op.h"
#include "tests/test_jit.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMin = -1.0f;
constexpr float kMax = 1.5f;

std::vector<Isa> TestedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Random values in [-3, 3] with NaN, +-inf and both bounds spread over the
// tensor (where n allows).
Tensor WithSpecials(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Tensor t = test::RandomTensor({n}, DataType::kFP32, rng, -3, 3);
  float* p = t.mutable_data<float>();
  const float specials[] = {kNaN, kInf, -kInf, kMin, kMax};
  for (int64_t k = 0; k < 5 && k < n; ++k) p[(k * 7 + n / 2) % n] = specials[k];
  return t;
}

// clip -> scale and clip_grad over [n]: every op a generated kernel, every
// output equal to the reference's (NaN where it has NaN).
TEST(JitModelOpsTest, ClipAndItsGradAreGeneratedAndExactOnBothIsas) {
  const std::vector<Isa> isas = TestedIsas();
  ASSERT_FALSE(isas.empty()) << "this CPU has neither AVX-512 nor AVX2+FMA";
  for (Isa isa : isas) {
    for (int64_t n : {1, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1001}) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " n=" + std::to_string(n));
      test::LoweringCase c;
      c.name = "clip";
      const auto bounds = [](OpBuilder b) { return b.Attr("min", kMin).Attr("max", kMax).Build(); };
      c.ops = {bounds(OpBuilder("clip").In("X", {"x"}).Out("Out", {"y"})),
               OpBuilder("scale").In("X", {"y"}).Out("Out", {"z"}).Attr("scale", 2.0f).Build(),
               bounds(OpBuilder("clip_grad").In("X", {"x"}).In("Out@GRAD", {"dy"}).Out("X@GRAD", {"dx"}))};
      c.inputs = {{"x", {n}}, {"dy", {n}}};
      c.outputs = {"y", "z", "dx"};
      c.given["x"] = WithSpecials(n, static_cast<unsigned>(n));
      c.options.isa = isa;
      const auto obj = test::CheckLoweringNumerics(c, 0, 0);
      for (const auto& ins : obj->program.instructions) {
        EXPECT_EQ(ins.kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
      }
    }
  }
}

// ---- a causal-attention program, JIT on and off -------------------------------------------

struct Program {
  proto::ProgramDesc desc;
  proto::BlockDesc* block;
  Program() {
    desc.set_version(1);
    block = desc.add_blocks();
    block->set_idx(0);
    block->set_parent_idx(-1);
  }
  void Var(const std::string& name, const Dims& dims, bool persistable, bool stop_gradient) {
    proto::VarDesc* v = block->add_vars();
    v->set_name(name);
    v->set_dtype(proto::FP32);
    for (int64_t d : dims) v->add_dims(d);
    v->set_persistable(persistable);
    v->set_stop_gradient(stop_gradient);
  }
  // Appends the op and declares its outputs by shape inference.
  void Op(const OpBuilder& op) {
    *block->add_ops() = op.Build();
    InferShapeAtBuild(block, block->ops_size() - 1, /*declare_outputs=*/true);
  }
};

constexpr int64_t kB = 2, kS = 5, kD = 6, kV = 7;

// x [B,S,D] -> qkv = x w -> split into q, k, v -> causal softmax(q k^T / sqrt(D))
// -> a = p v -> a[:, 1:] beside x[:, :-1] (concat) + b -> clip -> matmul w2
// -> log_softmax -> mean: the loss. Then its backward and sgd on w, b, w2.
proto::ProgramDesc AttentionProgram() {
  Program p;
  p.Var("x", {kB, kS, kD}, false, true);
  p.Var("w", {kD, 3 * kD}, true, false);
  p.Var("b", {2 * kD}, true, false);
  p.Var("w2", {2 * kD, kV}, true, false);
  p.Var("lr", {1}, true, true);
  p.Op(OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"qkv"}));
  p.Op(OpBuilder("split")
           .In("X", {"qkv"})
           .Out("Out", {"q", "k", "v"})
           .Attr("axis", int64_t{-1})
           .Attr("num", int64_t{3}));
  p.Op(OpBuilder("matmul")
           .In("X", {"q"})
           .In("Y", {"k"})
           .Out("Out", {"scores"})
           .Attr("transpose_Y", true)
           .Attr("alpha", 1.0f / std::sqrt(static_cast<float>(kD))));
  p.Op(OpBuilder("fused_softmax_mask_upper_triangle").In("X", {"scores"}).Out("Out", {"probs"}));
  p.Op(OpBuilder("matmul").In("X", {"probs"}).In("Y", {"v"}).Out("Out", {"a"}));
  const auto slice = [&](const std::string& in, const std::string& out, int64_t start, int64_t end) {
    p.Op(OpBuilder("slice")
             .In("Input", {in})
             .Out("Out", {out})
             .Attr("axes", std::vector<int64_t>{1})
             .Attr("starts", std::vector<int64_t>{start})
             .Attr("ends", std::vector<int64_t>{end}));
  };
  slice("a", "a_tail", 1, 100);
  slice("x", "x_head", 0, -1);
  p.Op(OpBuilder("concat").In("X", {"a_tail", "x_head"}).Out("Out", {"c"}).Attr("axis", int64_t{-1}));
  p.Op(OpBuilder("elementwise_add").In("X", {"c"}).In("Y", {"b"}).Out("Out", {"cb"}));
  p.Op(OpBuilder("clip").In("X", {"cb"}).Out("Out", {"cc"}).Attr("min", -0.6f).Attr("max", 0.6f));
  p.Op(OpBuilder("matmul").In("X", {"cc"}).In("Y", {"w2"}).Out("Out", {"logits"}));
  p.Op(OpBuilder("log_softmax").In("X", {"logits"}).Out("Out", {"logp"}));
  p.Op(OpBuilder("mean").In("X", {"logp"}).Out("Out", {"loss"}));
  const auto params = AppendBackward(&p.desc, "loss");
  for (const auto& [param, grad] : params) {
    *p.block->add_ops() = OpBuilder("sgd")
                              .In("Param", {param})
                              .In("Grad", {grad})
                              .In("LearningRate", {"lr"})
                              .Out("ParamOut", {param})
                              .Build();
  }
  ValidateProgram(p.desc);
  return p.desc;
}

const std::set<std::string> kNewOps = {"concat",
                                       "concat_grad",
                                       "split",
                                       "split_grad",
                                       "slice",
                                       "slice_grad",
                                       "clip",
                                       "clip_grad",
                                       "log_softmax",
                                       "log_softmax_grad",
                                       "fused_softmax_mask_upper_triangle",
                                       "fused_softmax_mask_upper_triangle_grad"};

struct Trace {
  std::vector<float> losses;
  std::map<std::string, Tensor> params;
};

// Runs `steps` training steps of `program` from the same initial values.
Trace Train(const proto::ProgramDesc& program, int steps, const OpRegistry& registry = OpRegistry::Global()) {
  std::mt19937 rng(5);
  Scope scope;
  const auto init = [&](const std::string& name, const Dims& dims, double limit) {
    scope.Var(name)->GetMutable()->CopyFrom(test::RandomTensor(dims, DataType::kFP32, rng, -limit, limit));
  };
  init("w", {kD, 3 * kD}, 0.6);
  init("b", {2 * kD}, 0.3);
  init("w2", {2 * kD, kV}, 0.5);
  scope.Var("lr")->GetMutable()->CopyFrom(test::FloatTensor({1}, {0.5f}));
  Executor exec({}, registry);
  auto plan = exec.Prepare(program, 0, {"loss"});
  Trace t;
  for (int s = 0; s < steps; ++s) {
    init("x", {kB, kS, kD}, 1.0);
    exec.Run(*plan, scope);
    t.losses.push_back(scope.GetVar("loss")->Get().data<float>()[0]);
  }
  for (const char* name : {"w", "b", "w2"}) t.params[name].CopyFrom(scope.GetVar(name)->Get());
  return t;
}

// Each test has a JIT of its own (test::TestJit).
class JitModelOpsProgramTest : public ::testing::Test {
 protected:
  test::TestJit jit_;
};

TEST_F(JitModelOpsProgramTest, EveryNewOpIsClusteredAndTrainingMatchesJitOff) {
  const proto::ProgramDesc program = AttentionProgram();
  std::set<std::string> present;
  for (const auto& op : program.blocks(0).ops()) present.insert(op.type());
  for (const auto& type : kNewOps) EXPECT_TRUE(present.count(type)) << type << " is not in the program";

  BuildJitPassOptions o;
  o.keep_vars = {"x", "loss"};
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(program, o);
  int launches = 0;
  for (const auto& op : jitted.blocks(0).ops()) {
    EXPECT_FALSE(kNewOps.count(op.type())) << op.type() << " was left outside the clusters";
    launches += op.type() == "jit_launch";
  }
  // The whole step, or the forward and the backward.
  EXPECT_GE(launches, 1);
  EXPECT_LE(launches, 2) << ProgramToText(jitted);

  const Trace off = Train(program, 4);
  for (Isa isa : TestedIsas()) {
    // Without oneDNN too: concat, split_grad and log_softmax then run their
    // reference kernels in the cluster.
    for (int variant = 0; variant < 3; ++variant) {
      const auto mode = variant == 1 ? jit::LaunchMode::kExecutor : jit::LaunchMode::kRuntime;
      SCOPED_TRACE(std::string(IsaName(isa)) + (variant == 1 ? " executor" : " runtime") +
                   (variant == 2 ? " without oneDNN" : ""));
      jit::JitOptions options;
      options.compile.isa = isa;
      options.compile.use_onednn = variant != 2;
      options.launch_mode = mode;
      jit_->Configure(options);
      jit_->ClearCache();
      const Trace on = Train(jitted, 4, jit_.registry());
      ASSERT_EQ(on.losses.size(), off.losses.size());
      for (size_t s = 0; s < off.losses.size(); ++s) {
        EXPECT_NEAR(on.losses[s], off.losses[s], 1e-5 * std::max(1.0f, std::fabs(off.losses[s]))) << "step " << s;
      }
      for (const auto& [name, t] : off.params) {
        EXPECT_EQ(test::CompareTensors(on.params.at(name), t, 1e-5, 1e-5), "") << name;
      }
      const jit::JitStats stats = jit_->stats();
      EXPECT_GT(stats.compiles, 0);
      EXPECT_EQ(stats.failures, 0);
      EXPECT_EQ(stats.unit_fallbacks, 0);
      // Every new op was lowered in a compiled cluster; clip and clip_grad
      // into generated kernels (with the bias add and its grad).
      std::string lowering;
      for (const auto& obj : jit_->cache().CachedObjects()) lowering += obj->lowering;
      for (const auto& type : kNewOps) {
        const bool lowered = lowering.find(" " + type + " ->") != std::string::npos ||
                             lowering.find(" " + type + ", #") != std::string::npos;
        EXPECT_TRUE(lowered) << type << "\n" << lowering;
      }
      EXPECT_NE(lowering.find("#9 clip -> ew_group"), std::string::npos) << lowering;
      bool clip_grad_fused = false;  // "#N clip_grad, #N+1 elementwise_add_grad -> ew_group"
      std::istringstream lines(lowering);
      for (std::string line; std::getline(lines, line);) {
        const size_t at = line.find(" clip_grad, #");
        clip_grad_fused = clip_grad_fused || (at != std::string::npos &&
                                              line.find(" elementwise_add_grad -> ew_group", at) != std::string::npos);
      }
      EXPECT_TRUE(clip_grad_fused) << lowering;
      // Losses change from step to step: the parameters are being trained.
      EXPECT_NE(on.losses.front(), on.losses.back());
    }
  }
}

}  // namespace
}  // namespace kiln
