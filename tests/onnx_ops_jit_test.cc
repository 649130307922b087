// Issue 28's ops inside JIT clusters: two small training programs (the
// unary, binary and bool ops; the tensor, reduction and normalisation ops),
// each with append_backward and sgd, run with the JIT off and on in both
// launch modes. Losses and trained parameters agree, no new op (or grad) is
// left outside a cluster, and inside the clusters every op with an
// elementwise lowering runs in a generated kernel, the others their
// framework kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "framework/backward.h"
#include "framework/program_builder.h"
#include "tests/jit_train_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using Net = test::TrainNet;

std::string Scale(ProgramBuilder& b, const std::string& v, float scale, float bias = 0) {
  return b.Op1("scale", {{"X", {v}}}, {{"scale", scale}, {"bias", bias}});
}
std::string Unary(ProgramBuilder& b, const std::string& type, const std::string& v, const AttrMap& attrs = {}) {
  return b.Op1(type, {{"X", {v}}}, attrs);
}
std::string Mul(ProgramBuilder& b, const std::string& x, const std::string& y) {
  return b.Op1("elementwise_mul", {{"X", {x}}, {"Y", {y}}});
}
std::string Cast(ProgramBuilder& b, const std::string& x) {
  return b.Op1("cast", {{"X", {x}}}, {{"in_dtype", int64_t{4}}, {"out_dtype", int64_t{0}}});
}

// Sums the means of `terms` into the loss, appends the backward pass and
// sgd, and feeds `steps` batches of x [8, 12] (and `more` inputs).
Net Finish(ProgramBuilder& b, const std::vector<std::string>& terms, unsigned seed) {
  Net n;
  std::vector<std::string> means;
  for (const std::string& t : terms) means.push_back(b.Op1("mean", {{"X", {t}}}));
  n.loss = b.Op1("sum", {{"X", means}});
  const auto params = AppendBackward(&b.main(), n.loss);
  const std::string lr = b.Persistable("lr", {1}, 0.05f);
  for (const auto& [p, g] : params) {
    b.RawOp(OpBuilder("sgd").In("Param", {p}).In("Grad", {g}).In("LearningRate", {lr}).Out("ParamOut", {p}).Build());
    n.compared.push_back(p);
  }
  n.startup = b.startup();
  n.train = b.main();
  std::mt19937 rng(seed);
  for (int s = 0; s < 5; ++s) n.steps.push_back({{"x", test::RandomTensor({8, 12}, DataType::kFP32, rng, -2, 2)}});
  return n;
}

std::string Fc(ProgramBuilder& b, const std::string& x, int64_t in, int64_t out, const std::string& name) {
  const std::string w = b.Param(name + ".w", {in, out}, Init::XavierUniform(in, out));
  const std::string bias = b.Param(name + ".b", {out}, Init::Constant(0.1f));
  return b.Op1("elementwise_add", {{"X", {b.Op1("matmul", {{"X", {x}}, {"Y", {w}}})}}, {"Y", {bias}}});
}

// h = fc(x) [8, 16], u = 0.9 tanh(h): every unary function of h or u, the
// binary ops against parameters, prelu per channel, and bool masks (isnan,
// isinf, the logical ops, a mod of the data) multiplied into terms.
Net UnaryBinaryNet() {
  ProgramBuilder b(51);
  const std::string x = b.Data("x", {-1, 12});
  const std::string h = Fc(b, x, 12, 16, "fc0");
  const std::string u = Scale(b, Unary(b, "tanh", h), 0.9f);
  std::vector<std::string> terms;
  for (const std::string t : {"asin", "acos", "atanh", "tan", "sinh", "cosh"}) terms.push_back(Unary(b, t, u));
  for (const std::string t : {"atan", "sin", "cos", "asinh", "erf", "softsign", "selu", "elu", "hard_sigmoid"}) {
    terms.push_back(Unary(b, t, h));
  }
  terms.push_back(Unary(b, "celu", h, {{"alpha", 0.5f}}));
  terms.push_back(Unary(b, "hard_swish", Scale(b, h, 3)));
  terms.push_back(Unary(b, "thresholded_relu", h, {{"threshold", 0.2f}}));
  terms.push_back(Unary(b, "acosh", Scale(b, Mul(b, u, u), 1, 1.5f)));
  terms.push_back(Unary(b, "reciprocal", Scale(b, u, 1, 2)));
  for (const std::string t : {"floor", "ceil", "round", "sign"}) terms.push_back(Mul(b, Unary(b, t, Scale(b, h, 3)), h));
  const std::string w2 = b.Param("w2", {16}, Init::Uniform(1.0f));
  terms.push_back(b.Op1("elementwise_max", {{"X", {h}}, {"Y", {w2}}}));
  terms.push_back(b.Op1("elementwise_min", {{"X", {u}}, {"Y", {w2}}}));
  terms.push_back(b.Op1("elementwise_pow", {{"X", {Scale(b, Unary(b, "sigmoid", h), 1, 0.5f)}}, {"Y", {w2}}}));
  const std::string alpha = b.Param("alpha", {16}, Init::Constant(0.25f));
  const std::string pr = b.Op1("prelu", {{"X", {h}}, {"Alpha", {alpha}}}, {{"mode", std::string("channel")}});
  // Masks: (not isnan(h) and h > 0) or isinf(h), xor (h < w2); and x mod 0.7 (data: no gradient).
  const std::string pos = b.Op1("greater_than", {{"X", {h}}, {"Y", {b.Persistable("zero", {1}, 0.0f)}}});
  std::string m = b.Op1("logical_and", {{"X", {Unary(b, "logical_not", Unary(b, "isnan", h))}}, {"Y", {pos}}});
  m = b.Op1("logical_or", {{"X", {m}}, {"Y", {Unary(b, "isinf", h)}}});
  m = b.Op1("logical_xor", {{"X", {m}}, {"Y", {b.Op1("less_than", {{"X", {h}}, {"Y", {w2}}})}}});
  terms.push_back(Mul(b, pr, Cast(b, m)));
  const std::string seven = b.Persistable("seven", {1}, 0.7f);
  const std::string mod = b.Op1("elementwise_mod", {{"X", {x}}, {"Y", {seven}}});
  const std::string fmod = b.Op1("elementwise_mod", {{"X", {x}}, {"Y", {seven}}}, {{"fmod", true}});
  const std::string hx = Fc(b, x, 12, 12, "fc1");
  terms.push_back(Mul(b, hx, b.Op1("elementwise_add", {{"X", {mod}}, {"Y", {fmod}}})));
  return Finish(b, terms, 52);
}

// h = fc(x) as [8, 3, 4]: expand, max, tile, pad (reflect, edge, constant),
// cumsum, the four reductions and instance_norm.
Net TensorNet() {
  ProgramBuilder b(53);
  const std::string x = b.Data("x", {-1, 12});
  const std::string h =
      b.Op1("reshape2", {{"X", {Fc(b, x, 12, 12, "fc0")}}}, {{"shape", std::vector<int64_t>{-1, 3, 4}}});
  const std::string we = b.Param("we", {3, 1}, Init::Uniform(0.5f));
  const std::string mx = b.Op1("elementwise_max", {{"X", {h}}, {"Y", {b.Op1("expand_v2", {{"X", {we}}}, {{"shape", std::vector<int64_t>{3, 4}}})}}});
  const std::string t = b.Op1("tile", {{"X", {mx}}}, {{"repeat_times", std::vector<int64_t>{1, 1, 2}}});
  auto pad = [&](const std::string& v, std::vector<int64_t> p, const std::string& mode) {
    return b.Op1("pad", {{"X", {v}}}, {{"paddings", p}, {"mode", mode}, {"pad_value", 0.5f}});
  };
  const std::string pd = pad(t, {0, 0, 1, 1, 2, 0}, "reflect");
  const std::string cs = b.Op1("cumsum", {{"X", {pd}}}, {{"axis", int64_t{2}}, {"exclusive", true}});
  const std::string s = b.Param("in.s", {3}, Init::Constant(1.0f)), bias = b.Param("in.b", {3}, Init::Constant(0.0f));
  const std::string in = b.Op1("instance_norm", {{"X", {h}}, {"Scale", {s}}, {"Bias", {bias}}}, {}, "Y");
  auto reduce = [&](const std::string& type, const std::string& v, std::vector<int64_t> dim) {
    return b.Op1(type, {{"X", {v}}}, {{"dim", dim}});
  };
  const std::vector<std::string> terms = {
      reduce("reduce_prod", Scale(b, Unary(b, "sigmoid", h), 1, 0.5f), {2}),
      reduce("reduce_l1", Scale(b, cs, 0.1f), {1}),
      reduce("reduce_l2", in, {1, 2}),
      reduce("logsumexp", pad(mx, {0, 0, 1, 0, 0, 2}, "edge"), {1}),
      pad(in, {0, 0, 0, 1, 1, 1}, "constant"),
  };
  return Finish(b, terms, 54);
}

// The types of the new ops in `program`, without their grads.
std::set<std::string> NewOpTypes(const proto::ProgramDesc& program) {
  static const std::set<std::string> kNew = {
      "erf", "floor", "ceil", "round", "sign", "reciprocal", "softsign", "sin", "cos", "tan", "asin", "acos", "atan",
      "sinh", "cosh", "asinh", "acosh", "atanh", "elu", "selu", "celu", "hard_sigmoid", "hard_swish",
      "thresholded_relu", "isnan", "isinf", "logical_and", "logical_or", "logical_xor", "logical_not",
      "elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod", "tile", "expand_v2", "pad",
      "cumsum", "reduce_prod", "reduce_l1", "reduce_l2", "logsumexp", "instance_norm", "prelu"};
  std::set<std::string> found;
  for (const auto& op : program.blocks(0).ops()) {
    if (kNew.count(op.type())) found.insert(op.type());
  }
  return found;
}

// No instruction `jit` compiled runs the framework kernel of an op (or grad)
// that has an elementwise lowering: those all became generated kernels.
void ExpectLoweredOpsInGeneratedKernels(const jit::JitRuntime& jit, const std::set<std::string>& types) {
  for (const auto& obj : jit.cache().CachedObjects()) {
    for (const auto& ins : obj->program.instructions) {
      const std::string& name = ins.kernel->name();
      for (const std::string& t : types) {
        for (const std::string& op : {t, t + "_grad"}) {
          const OpInfo* info = OpRegistry::Global().Find(op);
          if (name != op || info == nullptr || !info->elementwise) continue;
          ADD_FAILURE() << op << " runs its framework kernel\n" << obj->Listing();
        }
      }
    }
  }
}

// JIT on, on a JIT of its own, in both launch modes against JIT off.
void ExpectJitOnMatchesOff(const Net& n, const std::set<std::string>& want_types) {
  test::TestJit jit;
  EXPECT_EQ(NewOpTypes(n.train), want_types);
  const test::TrainRun off = test::TrainSteps(n, n.train);
  for (float l : off.losses) ASSERT_TRUE(std::isfinite(l));
  BuildJitPassOptions options;
  options.keep_vars = {"x", n.loss};
  const proto::ProgramDesc jitted = jit.ApplyBuildJit(n.train, options);
  EXPECT_GE(test::CountOps(jitted, "jit_launch"), 1);
  for (const std::string& t : want_types) {
    EXPECT_EQ(test::CountOps(jitted, t), 0) << t << " outside the clusters";
    EXPECT_EQ(test::CountOps(jitted, t + "_grad"), 0) << t << "_grad outside the clusters";
  }
  for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit->ClearCache();
    jit->SetLaunchMode(mode);
    const test::TrainRun on = test::TrainSteps(n, jitted, jit.registry());
    EXPECT_GT(jit->stats().compiles, 0);
    ExpectLoweredOpsInGeneratedKernels(jit.runtime(), want_types);
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t s = 0; s < off.losses.size(); ++s) {
      EXPECT_NEAR(on.losses[s], off.losses[s], 2e-5 * std::max(1.0f, std::fabs(off.losses[s]))) << "step " << s;
    }
    for (const auto& [name, want] : off.vars) {
      EXPECT_EQ(test::CompareTensors(on.vars.at(name), want, 2e-5, 1e-4), "") << name;
    }
  }
}

TEST(OnnxOpsJitTest, UnaryBinaryAndBoolOpsTrainTheSameWithTheJitOnAndOff) {
  ExpectJitOnMatchesOff(
      UnaryBinaryNet(),
      {"erf", "floor", "ceil", "round", "sign", "reciprocal", "softsign", "sin", "cos", "tan", "asin", "acos", "atan",
       "sinh", "cosh", "asinh", "acosh", "atanh", "elu", "selu", "celu", "hard_sigmoid", "hard_swish",
       "thresholded_relu", "isnan", "isinf", "logical_and", "logical_or", "logical_xor", "logical_not",
       "elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod", "prelu"});
}

TEST(OnnxOpsJitTest, TensorOpsTrainTheSameWithTheJitOnAndOff) {
  ExpectJitOnMatchesOff(TensorNet(), {"elementwise_max", "tile", "expand_v2", "pad", "cumsum", "reduce_prod",
                                      "reduce_l1", "reduce_l2", "logsumexp", "instance_norm"});
}

}  // namespace
}  // namespace kiln
