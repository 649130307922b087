// The math ops (log, sqrt, rsqrt, abs, pow, leaky_relu, softplus) and
// sigmoid_cross_entropy_with_logits end to end: a small training program
// with a focal-loss-like objective, its backward from append_backward and
// sgd, run with the JIT off and on in both launch modes. Losses, gradients
// and parameters agree, none of the new ops is left outside a cluster, and
// inside the clusters all of them run in generated kernels, except the loss
// with normalize (its framework kernel, by design).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "framework/backward.h"
#include "framework/executor.h"
#include "framework/program_builder.h"
#include "tests/jit_train_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {


const std::vector<std::string> kNewOps = {"log", "sqrt",       "rsqrt",    "abs",
                                          "pow", "leaky_relu", "softplus", "sigmoid_cross_entropy_with_logits"};

using Net = test::TrainNet;

std::string Fc(ProgramBuilder& b, const std::string& x, int64_t in, int64_t out, const std::string& name) {
  const std::string w = b.Param(name + ".w", {in, out}, Init::XavierUniform(in, out));
  const std::string bias = b.Param(name + ".b", {out}, Init::Constant(0.1f));
  return b.Op1("elementwise_add", {{"X", {b.Op1("matmul", {{"X", {x}}, {"Y", {w}}})}}, {"Y", {bias}}});
}

// 1 + x, then `type`: keeps log, sqrt and rsqrt on positive inputs.
std::string OfOnePlus(ProgramBuilder& b, const std::string& type, const std::string& x) {
  return b.Op1(type, {{"X", {b.Op1("scale", {{"X", {x}}}, {{"bias", 1.0f}})}}});
}

// logits = fc(leaky_relu(fc(x))); loss = mean((1 - sigmoid(logits))^2 *
// ce(logits, label)) + mean(log(1 + softplus(logits))) + mean(rsqrt(1 +
// |logits|)) + mean(sqrt(1 + |h|)) + mean((1 + h^2)^-1), ce with
// ignored labels (and normalized by their count with `normalize`).
Net FocalNet(bool normalize) {
  Net n;
  ProgramBuilder b(7);
  const std::string x = b.Data("x", {-1, 12});
  const std::string label = b.Data("label", {-1, 4});
  const std::string h = b.Op1("leaky_relu", {{"X", {Fc(b, x, 12, 16, "fc0")}}}, {{"alpha", 0.1f}});
  const std::string logits = Fc(b, h, 16, 4, "fc1");
  const std::string pt = b.Op1("sigmoid", {{"X", {logits}}});
  const std::string one_minus = b.Op1("scale", {{"X", {pt}}}, {{"scale", -1.0f}, {"bias", 1.0f}});
  const std::string weight = b.Op1("pow", {{"X", {one_minus}}}, {{"factor", 2.0f}});
  const std::string ce =
      b.Op1("sigmoid_cross_entropy_with_logits", {{"X", {logits}}, {"Label", {label}}}, {{"normalize", normalize}});
  const std::string focal = b.Op1("elementwise_mul", {{"X", {ce}}, {"Y", {weight}}});
  const std::string sp = b.Op1("softplus", {{"X", {logits}}}, {{"beta", 2.0f}});
  const std::string abs_logits = b.Op1("abs", {{"X", {logits}}});
  const std::string h2 = b.Op1("pow", {{"X", {h}}}, {{"factor", 2.0f}});
  const std::vector<std::string> terms = {
      focal,
      OfOnePlus(b, "log", sp),
      OfOnePlus(b, "rsqrt", abs_logits),
      OfOnePlus(b, "sqrt", b.Op1("abs", {{"X", {h}}})),
      b.Op1("pow", {{"X", {b.Op1("scale", {{"X", {h2}}}, {{"bias", 1.0f}})}}}, {{"factor", -1.0f}}),
  };
  std::vector<std::string> means;
  for (const std::string& t : terms) means.push_back(b.Op1("mean", {{"X", {t}}}));
  n.loss = b.Op1("sum", {{"X", means}});
  const auto params = AppendBackward(&b.main(), n.loss);
  const std::string lr = b.Persistable("lr", {1}, 0.1f);
  for (const auto& [p, g] : params) {
    b.RawOp(OpBuilder("sgd").In("Param", {p}).In("Grad", {g}).In("LearningRate", {lr}).Out("ParamOut", {p}).Build());
    n.compared.push_back(p);
  }
  n.compared.push_back(GradVarName(logits));
  n.compared.push_back(GradVarName(h));
  n.startup = b.startup();
  n.train = b.main();
  std::mt19937 rng(17);
  for (int s = 0; s < 5; ++s) {
    Tensor l = test::RandomTensor({8, 4}, DataType::kFP32, rng, 0.0, 1.0);
    for (int64_t i = s; i < l.numel(); i += 7) l.mutable_data<float>()[i] = -100.0f;  // ignored
    n.steps.push_back({{"x", test::RandomTensor({8, 12}, DataType::kFP32, rng, -2.0, 2.0)}, {"label", l}});
  }
  return n;
}

// Every instruction of `jit`'s compiled clusters that runs a framework
// kernel (its kernel named after the op) runs none of the new ops, except
// the loss and its grad with normalize.
void ExpectNewOpsInGeneratedKernels(const jit::JitRuntime& jit, bool normalize) {
  const std::string ce = "sigmoid_cross_entropy_with_logits";
  const std::set<std::string> allowed = normalize ? std::set<std::string>{ce, ce + "_grad"} : std::set<std::string>{};
  int framework_ce = 0;
  for (const auto& obj : jit.cache().CachedObjects()) {
    for (const auto& ins : obj->program.instructions) {
      const std::string& name = ins.kernel->name();
      for (const std::string& type : kNewOps) {
        if (name != type && name != type + "_grad") continue;
        EXPECT_TRUE(allowed.count(name)) << name << " runs its framework kernel\n" << obj->Listing();
        ++framework_ce;
      }
    }
  }
  EXPECT_EQ(framework_ce, normalize ? 2 : 0);
}

// Each test on a JIT of its own (tests/test_jit.h).
class MathOpsJitTest : public ::testing::TestWithParam<bool> {
 protected:
  test::TestJit jit_;
};

TEST_P(MathOpsJitTest, FocalLossTrainsTheSameWithTheJitOnAndOff) {
  const bool normalize = GetParam();
  const Net n = FocalNet(normalize);
  // The backward made a grad op of every new op.
  for (const std::string& type : kNewOps) {
    EXPECT_GE(test::CountOps(n.train, type), 1) << type;
    EXPECT_GE(test::CountOps(n.train, type + "_grad"), 1) << type;
  }
  const test::TrainRun off = test::TrainSteps(n, n.train);
  for (float l : off.losses) ASSERT_TRUE(std::isfinite(l));
  BuildJitPassOptions options;
  for (const auto& [name, t] : n.steps[0]) options.keep_vars.insert(name);
  options.keep_vars.insert(n.loss);
  options.keep_vars.insert(n.compared.begin(), n.compared.end());
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(n.train, options);
  EXPECT_GE(test::CountOps(jitted, "jit_launch"), 1);
  for (const std::string& type : kNewOps) {
    EXPECT_EQ(test::CountOps(jitted, type), 0) << type << " outside the clusters";
    EXPECT_EQ(test::CountOps(jitted, type + "_grad"), 0) << type << "_grad outside the clusters";
  }
  for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit_->ClearCache();
    jit_->SetLaunchMode(mode);
    const test::TrainRun on = test::TrainSteps(n, jitted, jit_.registry());
    EXPECT_GT(jit_->stats().compiles, 0);
    ExpectNewOpsInGeneratedKernels(jit_.runtime(), normalize);
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t s = 0; s < off.losses.size(); ++s) {
      EXPECT_NEAR(on.losses[s], off.losses[s], 1e-5 * std::max(1.0f, std::fabs(off.losses[s]))) << "step " << s;
    }
    for (const auto& [name, want] : off.vars) {
      EXPECT_EQ(test::CompareTensors(on.vars.at(name), want, 1e-5, 1e-4), "") << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Normalize, MathOpsJitTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "normalize" : "plain"; });

}  // namespace
}  // namespace kiln
