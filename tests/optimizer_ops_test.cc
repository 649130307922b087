// sgd, momentum, adam, adamw: one optimizer step against hand formulas, three
// adam steps against a plain computation, L2 and decoupled weight decay,
// in-place updates, registry entries and error messages. The fill ops:
// fill_optimizer_ops_test.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "framework/executor.h"
#include "framework/op_registry.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using namespace test;  // the op-test helpers (tests/op_test_util.h)

// ---- optimizers ----------------------------------------------------------------------

TEST(OptimizerOpsTest, SgdOneStep) {
  const proto::OpDesc op =
      OpBuilder("sgd").In("Param", {"p"}).In("Grad", {"g"}).In("LearningRate", {"lr"}).Out("ParamOut", {"p"}).Build();
  auto scope = RunOp(op, {{"p", FloatTensor({2}, {1.0f, 2.0f})},
                          {"g", FloatTensor({2}, {0.5f, -1.0f})},
                          {"lr", FloatTensor({1}, {0.1f})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("p")->Get(), FloatTensor({2}, {0.95f, 2.1f}), 1e-7, 0), "");
}

TEST(OptimizerOpsTest, SgdWritesAnotherVarWhenNotInPlace) {
  std::mt19937 rng(1);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    for (int64_t n : {1, 7, 17, 33}) {
      const Tensor p = RandomTensor({n}, dtype, rng);
      const Tensor g = RandomTensor({n}, dtype, rng);
      const proto::OpDesc op = OpBuilder("sgd")
                                   .In("Param", {"p"})
                                   .In("Grad", {"g"})
                                   .In("LearningRate", {"lr"})
                                   .Out("ParamOut", {"p2"})
                                   .Build();
      auto scope = RunOp(op, {{"p", p}, {"g", g}, {"lr", FloatTensor({1}, {0.25f})}});
      EXPECT_EQ(CompareTensors(scope->GetVar("p")->Get(), p, 0, 0), "");  // input untouched
      const Tensor& out = scope->GetVar("p2")->Get();
      ASSERT_EQ(out.dtype(), dtype);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(ValueAt(out, i), ValueAt(p, i) - 0.25 * ValueAt(g, i), 1e-6);
    }
  }
}

proto::OpDesc Momentum(float mu, bool nesterov) {
  return OpBuilder("momentum")
      .In("Param", {"p"})
      .In("Grad", {"g"})
      .In("Velocity", {"v"})
      .In("LearningRate", {"lr"})
      .Out("ParamOut", {"p"})
      .Out("VelocityOut", {"v"})
      .Attr("mu", mu)
      .Attr("use_nesterov", nesterov)
      .Build();
}

TEST(OptimizerOpsTest, MomentumOneStep) {
  const std::map<std::string, Tensor> in = {{"p", FloatTensor({2}, {1.0f, -1.0f})},
                                            {"g", FloatTensor({2}, {0.2f, 0.4f})},
                                            {"v", FloatTensor({2}, {0.5f, 0.0f})},
                                            {"lr", FloatTensor({1}, {0.1f})}};
  // v = 0.9 v + g = [0.65, 0.4]; p -= 0.1 v.
  auto scope = RunOp(Momentum(0.9f, false), in);
  EXPECT_EQ(CompareTensors(scope->GetVar("v")->Get(), FloatTensor({2}, {0.65f, 0.4f}), 1e-7, 0), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("p")->Get(), FloatTensor({2}, {0.935f, -1.04f}), 1e-7, 0), "");
  // Nesterov: p -= 0.1 (g + 0.9 v) = [1 - 0.0785, -1 - 0.076].
  scope = RunOp(Momentum(0.9f, true), in);
  EXPECT_EQ(CompareTensors(scope->GetVar("v")->Get(), FloatTensor({2}, {0.65f, 0.4f}), 1e-7, 0), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("p")->Get(), FloatTensor({2}, {0.9215f, -1.076f}), 1e-7, 0), "");
}

proto::OpDesc Adam(const std::string& param_out = "p") {
  return OpBuilder("adam")
      .In("Param", {"p"})
      .In("Grad", {"g"})
      .In("Moment1", {"m1"})
      .In("Moment2", {"m2"})
      .In("LearningRate", {"lr"})
      .In("Beta1Pow", {"b1p"})
      .In("Beta2Pow", {"b2p"})
      .Out("ParamOut", {param_out})
      .Out("Moment1Out", {"m1"})
      .Out("Moment2Out", {"m2"})
      .Out("Beta1PowOut", {"b1p"})
      .Out("Beta2PowOut", {"b2p"})
      .Build();
}

TEST(OptimizerOpsTest, AdamOneStep) {
  // First step from zero moments: m = 0.1 g, v = 0.001 g^2, lr_t = lr sqrt(0.001) / 0.1,
  // so p -= lr_t * 0.1 g / (sqrt(0.001) |g| + eps sqrt(0.001)) = lr * g / (|g| + eps) ~ lr sign(g).
  auto scope = RunOp(Adam(), {{"p", FloatTensor({3}, {1.0f, 2.0f, 3.0f})},
                              {"g", FloatTensor({3}, {0.5f, -2.0f, 0.0f})},
                              {"m1", FloatTensor({3}, {0, 0, 0})},
                              {"m2", FloatTensor({3}, {0, 0, 0})},
                              {"lr", FloatTensor({1}, {0.01f})},
                              {"b1p", FloatTensor({1}, {0.9f})},
                              {"b2p", FloatTensor({1}, {0.999f})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("p")->Get(), FloatTensor({3}, {0.99f, 2.01f, 3.0f}), 1e-6, 0), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("m1")->Get(), FloatTensor({3}, {0.05f, -0.2f, 0.0f}), 1e-7, 1e-6), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("m2")->Get(), FloatTensor({3}, {0.00025f, 0.004f, 0.0f}), 1e-9, 1e-4), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("b1p")->Get(), FloatTensor({1}, {0.81f}), 1e-7, 0), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("b2p")->Get(), FloatTensor({1}, {0.998001f}), 1e-7, 0), "");
}

TEST(OptimizerOpsTest, AdamThreeStepsMatchPlainComputationInPlace) {
  std::mt19937 rng(2);
  const int64_t n = 33;
  const float beta1 = 0.8f, beta2 = 0.95f, eps = 1e-6f, lr = 0.05f;
  proto::ProgramDesc program;
  proto::BlockDesc* block = program.add_blocks();
  block->set_idx(0);
  block->set_parent_idx(-1);
  proto::OpDesc op = Adam();
  SetAttr(&op, "beta1", beta1);
  SetAttr(&op, "beta2", beta2);
  SetAttr(&op, "epsilon", eps);
  *block->add_ops() = op;

  Scope scope;
  const Tensor p0 = RandomTensor({n}, DataType::kFP32, rng);
  scope.Var("p")->GetMutable()->CopyFrom(p0);
  scope.Var("m1")->GetMutable()->CopyFrom(FloatTensor({n}, std::vector<float>(n, 0.0f)));
  scope.Var("m2")->GetMutable()->CopyFrom(FloatTensor({n}, std::vector<float>(n, 0.0f)));
  scope.Var("lr")->GetMutable()->CopyFrom(FloatTensor({1}, {lr}));
  scope.Var("b1p")->GetMutable()->CopyFrom(FloatTensor({1}, {beta1}));
  scope.Var("b2p")->GetMutable()->CopyFrom(FloatTensor({1}, {beta2}));
  const void* param_buffer = scope.GetTensor("p")->raw_data();

  // The plain computation, in double.
  std::vector<double> p(n), m(n, 0.0), v(n, 0.0);
  for (int64_t i = 0; i < n; ++i) p[i] = ValueAt(p0, i);
  double b1p = beta1, b2p = beta2;

  Executor exec({/*use_onednn=*/false, false, false});
  auto plan = exec.Prepare(program, 0, {});
  for (int step = 0; step < 3; ++step) {
    const Tensor g = RandomTensor({n}, DataType::kFP32, rng);
    scope.Var("g")->GetMutable()->CopyFrom(g);
    exec.Run(*plan, scope);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = ValueAt(g, i);
      m[i] = beta1 * m[i] + (1 - static_cast<double>(beta1)) * gi;
      v[i] = beta2 * v[i] + (1 - static_cast<double>(beta2)) * gi * gi;
      const double lr_t = lr * std::sqrt(1 - b2p) / (1 - b1p);
      p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps * std::sqrt(1 - b2p));
    }
    b1p *= beta1;
    b2p *= beta2;
    const Tensor& pt = *scope.GetTensor("p");
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(ValueAt(pt, i), p[i], 2e-6) << "step " << step << " i " << i;
      EXPECT_NEAR(ValueAt(*scope.GetTensor("m1"), i), m[i], 1e-6) << "step " << step;
      EXPECT_NEAR(ValueAt(*scope.GetTensor("m2"), i), v[i], 1e-7) << "step " << step;
    }
    EXPECT_NEAR(ValueAt(*scope.GetTensor("b1p"), 0), b1p, 1e-6);
    EXPECT_NEAR(ValueAt(*scope.GetTensor("b2p"), 0), b2p, 1e-6);
  }
  // Updated in place: the parameter kept its buffer.
  EXPECT_EQ(scope.GetTensor("p")->raw_data(), param_buffer);
}

TEST(OptimizerOpsTest, AdamFp64AndNotInPlace) {
  std::mt19937 rng(3);
  const Tensor p = RandomTensor({7}, DataType::kFP64, rng);
  const Tensor g = RandomTensor({7}, DataType::kFP64, rng);
  auto scope = RunOp(Adam("p_new"), {{"p", p},
                                     {"g", g},
                                     {"m1", RandomTensor({7}, DataType::kFP64, rng)},
                                     {"m2", RandomTensor({7}, DataType::kFP64, rng, 0.0, 1.0)},
                                     {"lr", FloatTensor({1}, {0.1f})},
                                     {"b1p", FloatTensor({1}, {0.9f * 0.9f})},
                                     {"b2p", FloatTensor({1}, {0.999f * 0.999f})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("p")->Get(), p, 0, 0), "");
  const Tensor& out = scope->GetVar("p_new")->Get();
  EXPECT_EQ(out.dtype(), DataType::kFP64);
  for (int64_t i = 0; i < 7; ++i) EXPECT_NE(ValueAt(out, i), ValueAt(p, i));
}

Tensor Copied(const Tensor& t) {
  Tensor c;
  c.CopyFrom(t);
  return c;
}

// ---- weight decay: L2 (regularization_coeff) and adamw's decoupled coeff ------------

// An update with regularization_coeff c equals the same update without it on
// the gradient g + c * p (Paddle's L2Decay), for each op that takes it.
TEST(OptimizerOpsTest, L2DecayIsTheUpdateOfGradPlusCoeffTimesParam) {
  std::mt19937 rng(4);
  const float c = 0.3f;
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    for (const std::string type : {"sgd", "momentum", "adam"}) {
      SCOPED_TRACE(type + " " + DataTypeName(dtype));
      const int64_t n = 17;
      const Tensor p = RandomTensor({n}, dtype, rng), g = RandomTensor({n}, dtype, rng);
      std::vector<float> g_l2_values(n);
      for (int64_t i = 0; i < n; ++i) g_l2_values[i] = static_cast<float>(ValueAt(g, i) + c * ValueAt(p, i));
      const Tensor g_l2 = test::CastTo(FloatTensor({n}, g_l2_values), dtype);
      std::map<std::string, Tensor> in = {{"p", p}, {"lr", FloatTensor({1}, {0.1f})}};
      proto::OpDesc op = type == "sgd" ? OpBuilder("sgd")
                                             .In("Param", {"p"})
                                             .In("Grad", {"g"})
                                             .In("LearningRate", {"lr"})
                                             .Out("ParamOut", {"p"})
                                             .Build()
                         : type == "momentum" ? Momentum(0.9f, false)
                                              : Adam();
      if (type == "momentum") in["v"] = RandomTensor({n}, dtype, rng);
      if (type == "adam") {
        in["m1"] = RandomTensor({n}, dtype, rng);
        in["m2"] = RandomTensor({n}, dtype, rng, 0.0, 1.0);
        in["b1p"] = FloatTensor({1}, {0.81f});
        in["b2p"] = FloatTensor({1}, {0.998f});
      }
      in["g"] = g_l2;
      auto want = RunOp(op, in);
      SetAttr(&op, "regularization_coeff", c);
      in["g"] = g;
      auto got = RunOp(op, in);
      for (const std::string var : {"p", "v", "m1", "m2"}) {
        if (!in.count(var)) continue;
        EXPECT_EQ(CompareTensors(got->GetVar(var)->Get(), want->GetVar(var)->Get(), 1e-6, 1e-6), "") << var;
      }
      // And it decays: the parameter moved further than without the term.
      SetAttr(&op, "regularization_coeff", 0.f);
      auto plain = RunOp(op, in);
      EXPECT_NE(CompareTensors(got->GetVar("p")->Get(), plain->GetVar("p")->Get(), 1e-6, 0), "");
    }
  }
}

proto::OpDesc AdamW(float coeff) {
  proto::OpDesc op = Adam();
  op.set_type("adamw");
  SetAttr(&op, "coeff", coeff);
  return op;
}

// adamw against PyTorch's AdamW formula in double: p *= 1 - lr * coeff, then
// Adam's bias-corrected step, three steps in place; coeff 0 is adam exactly.
TEST(OptimizerOpsTest, AdamWThreeStepsMatchDecoupledDecayFormula) {
  std::mt19937 rng(5);
  const int64_t n = 33;
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, lr = 0.05f, coeff = 0.2f;
  const Tensor p0 = RandomTensor({n}, DataType::kFP32, rng);
  std::map<std::string, Tensor> state = {{"p", p0},
                                         {"m1", FloatTensor({n}, std::vector<float>(n, 0.0f))},
                                         {"m2", FloatTensor({n}, std::vector<float>(n, 0.0f))},
                                         {"lr", FloatTensor({1}, {lr})},
                                         {"b1p", FloatTensor({1}, {beta1})},
                                         {"b2p", FloatTensor({1}, {beta2})}};
  std::map<std::string, Tensor> adam_state = state;
  std::vector<double> p(n), m(n, 0.0), v(n, 0.0);
  for (int64_t i = 0; i < n; ++i) p[i] = ValueAt(p0, i);
  double b1p = beta1, b2p = beta2;
  for (int step = 0; step < 3; ++step) {
    const Tensor g = RandomTensor({n}, DataType::kFP32, rng);
    state["g"] = g;
    auto scope = RunOp(AdamW(coeff), state);
    for (auto& [name, t] : state) t = Copied(scope->GetVar(name)->Get());
    adam_state["g"] = g;
    auto adam_w0 = RunOp(AdamW(0.f), adam_state);
    auto adam = RunOp(Adam(), adam_state);
    for (const std::string var : {"p", "m1", "m2", "b1p", "b2p"}) {
      EXPECT_EQ(CompareTensors(adam_w0->GetVar(var)->Get(), adam->GetVar(var)->Get(), 0, 0), "") << var;
    }
    for (auto& [name, t] : adam_state) t = Copied(adam->GetVar(name)->Get());
    for (int64_t i = 0; i < n; ++i) {
      const double gi = ValueAt(g, i);
      p[i] *= 1 - static_cast<double>(lr) * coeff;
      m[i] = beta1 * m[i] + (1 - static_cast<double>(beta1)) * gi;
      v[i] = beta2 * v[i] + (1 - static_cast<double>(beta2)) * gi * gi;
      const double m_hat = m[i] / (1 - b1p), v_hat = v[i] / (1 - b2p);
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
    b1p *= beta1;
    b2p *= beta2;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(ValueAt(state["p"], i), p[i], 2e-6) << "step " << step << " i " << i;
      EXPECT_NEAR(ValueAt(state["m1"], i), m[i], 1e-6) << "step " << step;
      EXPECT_NEAR(ValueAt(state["m2"], i), v[i], 1e-7) << "step " << step;
    }
  }
  // The decay moved the parameters: adamw and adam differ after three steps.
  EXPECT_NE(CompareTensors(state["p"], adam_state["p"], 1e-5, 0), "");
}

TEST(OptimizerOpsTest, RegistryEntries) {
  const std::map<std::string, size_t> inplace_pairs = {{"sgd", 1}, {"momentum", 2}, {"adam", 5}, {"adamw", 5}};
  for (const auto& [type, pairs] : inplace_pairs) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_FALSE(info.doc.empty());
    EXPECT_EQ(info.jit, JitLowering::kOptimizer) << type;
    EXPECT_FALSE(static_cast<bool>(info.grad_maker)) << type;
    EXPECT_EQ(info.inplace.size(), pairs) << type;
    EXPECT_EQ(info.inplace[0], (std::pair<std::string, std::string>{"Param", "ParamOut"}));
    EXPECT_EQ(info.no_grad_inputs.size(), info.inputs.size()) << type;
  }
  EXPECT_EQ(std::get<float>(*OpRegistry::Global().Get("adam").FindAttr("epsilon")->default_value), 1e-8f);
  for (const std::string type : {"sgd", "momentum", "adam"}) {
    EXPECT_EQ(std::get<float>(*OpRegistry::Global().Get(type).FindAttr("regularization_coeff")->default_value), 0.f);
  }
  EXPECT_EQ(OpRegistry::Global().Get("adamw").FindAttr("regularization_coeff"), nullptr);
  EXPECT_EQ(std::get<float>(*OpRegistry::Global().Get("adamw").FindAttr("coeff")->default_value), 0.01f);
}

TEST(OptimizerOpsTest, BadInputsNameTheOp) {
  const proto::OpDesc op =
      OpBuilder("sgd").In("Param", {"p"}).In("Grad", {"g"}).In("LearningRate", {"lr"}).Out("ParamOut", {"p"}).Build();
  std::string e = ErrorOf([&] {
    RunOp(op, {{"p", FloatTensor({2}, {1, 2})}, {"g", FloatTensor({3}, {1, 2, 3})}, {"lr", FloatTensor({1}, {0.1f})}});
  });
  EXPECT_NE(e.find("sgd"), std::string::npos) << e;
  EXPECT_NE(e.find("input Grad: expected dims [2]"), std::string::npos) << e;
  e = ErrorOf([&] {
    RunOp(op,
          {{"p", FloatTensor({2}, {1, 2})}, {"g", FloatTensor({2}, {1, 2})}, {"lr", FloatTensor({2}, {0.1f, 0.2f})}});
  });
  EXPECT_NE(e.find("input LearningRate: expected one element"), std::string::npos) << e;
  e = ErrorOf([&] {
    RunOp(Momentum(0.9f, false), {{"p", FloatTensor({2}, {1, 2})},
                                  {"g", FloatTensor({2}, {1, 2})},
                                  {"v", FloatTensor({2, 1}, {1, 2})},
                                  {"lr", FloatTensor({1}, {0.1f})}});
  });
  EXPECT_NE(e.find("momentum"), std::string::npos) << e;
  EXPECT_NE(e.find("input Velocity: expected dims [2]"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
