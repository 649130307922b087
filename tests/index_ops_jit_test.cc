// reduce_max, reduce_min, a comparison, where, arg_max, one_hot, gather and
// cast (f32 -> f64 -> f32) inside JIT clusters: a small training program
// (forward, append_backward with a mean loss, sgd) runs with the JIT off and
// on, in both launch modes, gives the same losses and parameters, and none of
// these ops or their grads is left outside a cluster. And training through
// where(h > 0, log(h), h * h) with a bool -> f32 cast, whose comparisons,
// where, where_grad and cast run in generated kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "framework/backward.h"
#include "framework/program_builder.h"
#include "tests/jit_train_util.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {


using Net = test::TrainNet;

std::string Cast(ProgramBuilder& b, const std::string& x, DataType in, DataType out) {
  return b.Op1("cast", {{"X", {x}}},
               {{"in_dtype", static_cast<int64_t>(in)}, {"out_dtype", static_cast<int64_t>(out)}});
}

// h = x @ w0 + b0; s = where(h < max_row(h), h - max_row(h), h / 2) + one_hot(arg_max_row(h));
// g = gather(s, idx); loss = mean(cast(reduce_min(cast(g, f64)), f32)) + mean(tanh(g @ w1)).
Net IndexOpsNet() {
  Net n;
  ProgramBuilder b(21);
  const std::string x = b.Data("x", {-1, 6});
  const std::string idx = b.Data("idx", {-1}, DataType::kINT64);
  const std::string w0 = b.Param("w0", {6, 8}, Init::XavierUniform(6, 8));
  const std::string b0 = b.Param("b0", {8}, Init::Uniform(0.5f));
  const std::string w1 = b.Param("w1", {8, 4}, Init::XavierUniform(8, 4));
  std::string h = b.Op1("matmul", {{"X", {x}}, {"Y", {w0}}});
  h = b.Op1("elementwise_add", {{"X", {h}}, {"Y", {b0}}});
  const AttrMap row = {{"dim", std::vector<int64_t>{1}}, {"keep_dim", true}};
  const std::string m = b.Op1("reduce_max", {{"X", {h}}}, row);
  const std::string c = b.Op1("less_than", {{"X", {h}}, {"Y", {m}}});
  const std::string d = b.Op1("elementwise_sub", {{"X", {h}}, {"Y", {m}}});
  const std::string hs = b.Op1("scale", {{"X", {h}}}, {{"scale", 0.5f}});
  std::string s = b.Op1("where", {{"Condition", {c}}, {"X", {d}}, {"Y", {hs}}});
  const std::string a = b.Op1("arg_max", {{"X", {h}}}, {{"axis", int64_t{-1}}, {"keepdims", true}});
  const std::string oh = b.Op1("one_hot", {{"X", {a}}}, {{"depth", int64_t{8}}});
  s = b.Op1("elementwise_add", {{"X", {s}}, {"Y", {oh}}});
  const std::string g = b.Op1("gather", {{"X", {s}}, {"Index", {idx}}});
  const std::string gm = b.Op1("reduce_min", {{"X", {Cast(b, g, DataType::kFP32, DataType::kFP64)}}},
                               {{"dim", std::vector<int64_t>{1}}});
  const std::string l1 = b.Op1("mean", {{"X", {Cast(b, gm, DataType::kFP64, DataType::kFP32)}}});
  const std::string z = b.Op1("tanh", {{"X", {b.Op1("matmul", {{"X", {g}}, {"Y", {w1}}})}}});
  n.loss = b.Op1("elementwise_add", {{"X", {l1}}, {"Y", {b.Op1("mean", {{"X", {z}}})}}});
  const auto params = AppendBackward(&b.main(), n.loss);
  const std::string lr = b.Persistable("lr", {1}, 0.1f);
  for (const auto& [p, grad] : params) {
    b.RawOp(OpBuilder("sgd").In("Param", {p}).In("Grad", {grad}).In("LearningRate", {lr}).Out("ParamOut", {p}).Build());
    n.compared.push_back(p);
  }
  n.startup = b.startup();
  n.train = b.main();
  std::mt19937 rng(22);
  std::uniform_int_distribution<int64_t> pick(0, 6);
  for (int step = 0; step < 5; ++step) {
    std::vector<int64_t> rows(9);
    for (auto& r : rows) r = pick(rng);  // 9 picks of 7 rows: repeats in every step
    n.steps.push_back({{"x", test::RandomTensor({7, 6}, DataType::kFP32, rng)}, {"idx", test::Int64Tensor({9}, rows)}});
  }
  return n;
}

// h = x @ w0 + b0; s = where(h > 0, log(h), h * h) + h * cast(h <= 0, f32);
// loss = mean(tanh(s @ w1)).
Net WhereNet() {
  Net n;
  ProgramBuilder b(31);
  const std::string x = b.Data("x", {-1, 6});
  const std::string w0 = b.Param("w0", {6, 9}, Init::XavierUniform(6, 9));
  const std::string b0 = b.Param("b0", {9}, Init::Uniform(0.5f));
  const std::string w1 = b.Param("w1", {9, 3}, Init::XavierUniform(9, 3));
  const std::string zero = b.Persistable("zero", {1}, 0.0f);
  std::string h = b.Op1("matmul", {{"X", {x}}, {"Y", {w0}}});
  h = b.Op1("elementwise_add", {{"X", {h}}, {"Y", {b0}}});
  const std::string pos = b.Op1("greater_than", {{"X", {h}}, {"Y", {zero}}});
  const std::string lh = b.Op1("log", {{"X", {h}}});
  const std::string sq = b.Op1("elementwise_mul", {{"X", {h}}, {"Y", {h}}});
  std::string s = b.Op1("where", {{"Condition", {pos}}, {"X", {lh}}, {"Y", {sq}}});
  const std::string neg = Cast(b, b.Op1("less_equal", {{"X", {h}}, {"Y", {zero}}}), DataType::kBOOL, DataType::kFP32);
  s = b.Op1("elementwise_add", {{"X", {s}}, {"Y", {b.Op1("elementwise_mul", {{"X", {h}}, {"Y", {neg}}})}}});
  const std::string z = b.Op1("tanh", {{"X", {b.Op1("matmul", {{"X", {s}}, {"Y", {w1}}})}}});
  n.loss = b.Op1("mean", {{"X", {z}}});
  const auto params = AppendBackward(&b.main(), n.loss);
  const std::string lr = b.Persistable("lr", {1}, 0.1f);
  for (const auto& [p, grad] : params) {
    b.RawOp(OpBuilder("sgd").In("Param", {p}).In("Grad", {grad}).In("LearningRate", {lr}).Out("ParamOut", {p}).Build());
    n.compared.push_back(p);
  }
  n.startup = b.startup();
  n.train = b.main();
  std::mt19937 rng(32);
  for (int step = 0; step < 6; ++step) {
    n.steps.push_back({{"x", test::RandomTensor({11, 6}, DataType::kFP32, rng)}});
  }
  return n;
}

class IndexOpsJitTest : public test::JitTrainTest {};

TEST_F(IndexOpsJitTest, TrainingMatchesJitOffInBothLaunchModes) {
  const Net n = IndexOpsNet();
  // Every new op and grad is on the program's path (the backward made them).
  const std::vector<std::string> types = {"reduce_max", "reduce_max_grad", "reduce_min", "reduce_min_grad",
                                          "less_than",  "where",           "where_grad", "arg_max",
                                          "one_hot",    "gather",          "gather_grad", "cast"};
  for (const std::string& type : types) EXPECT_GT(test::CountOps(n.train, type), 0) << type;
  const test::TrainRun off = test::TrainSteps(n, n.train);
  BuildJitPassOptions options;
  options.keep_vars = {"x", "idx", n.loss};
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(n.train, options);
  EXPECT_GE(test::CountOps(jitted, "jit_launch"), 1);
  for (const std::string& type : types) EXPECT_EQ(test::CountOps(jitted, type), 0) << type << " outside the clusters";
  for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit_->ClearCache();
    jit_->SetLaunchMode(mode);
    const test::TrainRun on = test::TrainSteps(n, jitted, jit_.registry());
    EXPECT_GT(jit_->stats().compiles, 0);
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t s = 0; s < off.losses.size(); ++s) {
      EXPECT_NEAR(on.losses[s], off.losses[s], 1e-5 * std::max(1.0f, std::fabs(off.losses[s]))) << "step " << s;
    }
    for (const auto& [name, want] : off.vars) {
      EXPECT_EQ(test::CompareTensors(on.vars.at(name), want, 1e-5, 1e-5), "") << name;
    }
  }
  // Training moved every parameter away from its start.
  Scope start;
  Executor().RunProgram(n.startup, start);
  for (const auto& [name, trained] : off.vars) {
    EXPECT_NE(test::CompareTensors(trained, start.GetVar(name)->Get(), 1e-6, 0), "") << name << " did not move";
  }
}

// The ops of WhereNet run in generated kernels in both launch modes: no
// compiled instruction is their framework kernel, and one generated kernel
// fuses the comparison, where and its gradient.
TEST_F(IndexOpsJitTest, TrainingThroughWhereIsGeneratedAndMatchesJitOff) {
  const Net n = WhereNet();
  const std::vector<std::string> types = {"greater_than", "less_equal", "where", "where_grad", "cast"};
  for (const std::string& type : types) EXPECT_GT(test::CountOps(n.train, type), 0) << type;
  const test::TrainRun off = test::TrainSteps(n, n.train);
  BuildJitPassOptions options;
  options.keep_vars = {"x", n.loss};
  const proto::ProgramDesc jitted = jit_.ApplyBuildJit(n.train, options);
  for (const std::string& type : types) EXPECT_EQ(test::CountOps(jitted, type), 0) << type << " outside the clusters";
  for (auto mode : {jit::LaunchMode::kRuntime, jit::LaunchMode::kExecutor}) {
    SCOPED_TRACE(mode == jit::LaunchMode::kRuntime ? "runtime" : "executor");
    jit_->ClearCache();
    jit_->SetLaunchMode(mode);
    const test::TrainRun on = test::TrainSteps(n, jitted, jit_.registry());
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t s = 0; s < off.losses.size(); ++s) {
      EXPECT_NEAR(on.losses[s], off.losses[s], 1e-5 * std::max(1.0f, std::fabs(off.losses[s]))) << "step " << s;
    }
    for (const auto& [name, want] : off.vars) {
      EXPECT_EQ(test::CompareTensors(on.vars.at(name), want, 1e-5, 1e-5), "") << name;
    }
    std::set<std::string> fused;
    const auto objects = jit_->cache().CachedObjects();
    ASSERT_FALSE(objects.empty());
    for (const auto& obj : objects) {
      for (const auto& ins : obj->program.instructions) {
        const std::string name = ins.kernel->name();
        for (const std::string& type : types) EXPECT_NE(name, type) << "a framework kernel\n" << obj->Listing();
        if (name.rfind("ew_", 0) != 0) continue;
        for (const std::string& op : ins.kernel->fused_ops()) fused.insert(op);
      }
    }
    for (const std::string& type : types) EXPECT_EQ(fused.count(type), 1u) << type << " not in a generated kernel";
  }
}

}  // namespace
}  // namespace kiln
