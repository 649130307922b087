// Gradient clipping: the clip_by_global_norm op (Paddle's factor, summed in
// double), the update ops' GradScale input and grad_clip_min/max attributes
// (the update of the clipped gradient, clipped before L2 decay), what
// AppendOptimizer appends for each, and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "framework/backward.h"
#include "framework/executor.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/optimizer_builder.h"
#include "framework/program_builder.h"
#include "tests/op_test_util.h"
#include "tests/optimizer_test_util.h"

namespace kiln {
namespace {

using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

proto::OpDesc GlobalNorm(const std::vector<std::string>& xs, float clip_norm) {
  return OpBuilder("clip_by_global_norm").In("X", xs).Out("Scale", {"s"}).Attr("clip_norm", clip_norm).Build();
}

double SumSquares(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += ValueAt(t, i) * ValueAt(t, i);
  return s;
}

// Gradients of several shapes and both float dtypes; the factor is
// clip_norm / norm while the norm exceeds clip_norm and exactly 1 otherwise.
TEST(ClipByGlobalNormTest, ScaleIsClipNormOverTheNormOfAllGradients) {
  std::mt19937 rng(1);
  const std::map<std::string, Tensor> in = {{"a", RandomTensor({17}, DataType::kFP32, rng, -3, 3)},
                                            {"b", RandomTensor({4, 5}, DataType::kFP32, rng, -3, 3)},
                                            {"c", RandomTensor({3}, DataType::kFP64, rng, -3, 3)},
                                            {"d", RandomTensor({1000, 3}, DataType::kFP32, rng, -1, 1)}};
  double sum = 0;
  for (const auto& [name, t] : in) sum += SumSquares(t);
  const double norm = std::sqrt(sum);
  ASSERT_GT(norm, 10);
  for (float clip : {0.5f, 10.f, static_cast<float>(norm) * 0.99f}) {
    auto scope = RunOp(GlobalNorm({"a", "b", "c", "d"}, clip), in);
    const Tensor& s = scope->GetVar("s")->Get();
    ASSERT_EQ(s.dtype(), DataType::kFP32);
    ASSERT_EQ(s.dims(), (Dims{1}));
    EXPECT_NEAR(s.data<float>()[0], clip / norm, 1e-6 * clip / norm) << clip;
  }
  for (float clip : {static_cast<float>(norm) * 1.01f, 1e6f}) {
    auto scope = RunOp(GlobalNorm({"a", "b", "c", "d"}, clip), in);
    EXPECT_EQ(scope->GetVar("s")->Get().data<float>()[0], 1.f) << clip;
  }
}

// A NaN gradient gives a NaN factor: the step shows it instead of hiding it.
TEST(ClipByGlobalNormTest, ANanGradientGivesANanScale) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto scope = RunOp(GlobalNorm({"a", "b"}, 1.f), {{"a", FloatTensor({2}, {1, nan})}, {"b", FloatTensor({1}, {3})}});
  EXPECT_TRUE(std::isnan(scope->GetVar("s")->Get().data<float>()[0]));
}

TEST(ClipByGlobalNormTest, BadInputsNameTheOp) {
  const std::map<std::string, Tensor> in = {{"a", FloatTensor({2}, {1, 2})}};
  for (float clip : {0.f, -1.f, std::numeric_limits<float>::infinity()}) {
    const std::string e = ErrorOf([&] { RunOp(GlobalNorm({"a"}, clip), in); });
    EXPECT_NE(e.find("clip_by_global_norm"), std::string::npos) << e;
    EXPECT_NE(e.find("attribute clip_norm: expected finite and > 0"), std::string::npos) << e;
  }
  std::string e = ErrorOf([&] { RunOp(GlobalNorm({"i"}, 1.f), {{"i", test::Int64Tensor({2}, {1, 2})}}); });
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
  e = ErrorOf([&] { RunOp(GlobalNorm({}, 1.f), in); });
  EXPECT_NE(e.find("X"), std::string::npos) << e;
}

// ---- the update ops ------------------------------------------------------------------

proto::OpDesc Update(const std::string& type) {
  OpBuilder op(type);
  op.In("Param", {"p"}).In("Grad", {"g"}).In("LearningRate", {"lr"}).Out("ParamOut", {"p"});
  if (type == "momentum") op.In("Velocity", {"v"}).Out("VelocityOut", {"v"});
  if (type == "adam" || type == "adamw") {
    op.In("Moment1", {"m1"}).In("Moment2", {"m2"}).In("Beta1Pow", {"b1p"}).In("Beta2Pow", {"b2p"});
    op.Out("Moment1Out", {"m1"}).Out("Moment2Out", {"m2"}).Out("Beta1PowOut", {"b1p"}).Out("Beta2PowOut", {"b2p"});
  }
  return op.Build();
}

std::map<std::string, Tensor> UpdateInputs(const std::string& type, int64_t n, DataType dtype, std::mt19937& rng) {
  std::map<std::string, Tensor> in = {{"p", RandomTensor({n}, dtype, rng)},
                                      {"g", RandomTensor({n}, dtype, rng, -2, 2)},
                                      {"lr", FloatTensor({1}, {0.1f})}};
  if (type == "momentum") in["v"] = RandomTensor({n}, dtype, rng);
  if (type == "adam" || type == "adamw") {
    in["m1"] = RandomTensor({n}, dtype, rng);
    in["m2"] = RandomTensor({n}, dtype, rng, 0.0, 1.0);
    in["b1p"] = FloatTensor({1}, {0.81f});
    in["b2p"] = FloatTensor({1}, {0.998f});
  }
  return in;
}

// With GradScale s and bounds [lo, hi], each update equals the same update
// without them on min(max(g * s, lo), hi); with L2 decay too, the clipped
// gradient then takes coeff * p (Paddle's order: clip, then regularize).
TEST(GradClipUpdateTest, TheUpdateIsThatOfTheClippedGradient) {
  std::mt19937 rng(2);
  const float s = 0.37f, lo = -0.3f, hi = 0.25f, l2 = 0.2f;
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    for (const std::string type : {"sgd", "momentum", "adam", "adamw"}) {
      for (bool with_l2 : {false, true}) {
        if (with_l2 && type == "adamw") continue;  // adamw's decay does not touch g
        SCOPED_TRACE(type + " " + DataTypeName(dtype) + (with_l2 ? " l2" : ""));
        const int64_t n = 33;
        std::map<std::string, Tensor> in = UpdateInputs(type, n, dtype, rng);
        const Tensor g = in["g"];
        std::vector<float> clipped(n);
        int clamped = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double v = ValueAt(g, i) * static_cast<double>(static_cast<float>(s));
          clamped += v < lo || v > hi;
          const double c = std::min(std::max(v, static_cast<double>(lo)), static_cast<double>(hi));
          clipped[i] = static_cast<float>(with_l2 ? c + l2 * ValueAt(in["p"], i) : c);
        }
        ASSERT_GT(clamped, 3);
        ASSERT_LT(clamped, n - 3);
        in["g"] = test::CastTo(FloatTensor({n}, clipped), dtype);
        auto want = RunOp(Update(type), in);
        proto::OpDesc op = Update(type);
        SetInput(&op, "GradScale", {"s"});
        SetAttr(&op, "grad_clip_min", lo);
        SetAttr(&op, "grad_clip_max", hi);
        if (with_l2) SetAttr(&op, "regularization_coeff", l2);
        in["g"] = g;
        in["s"] = FloatTensor({1}, {s});
        auto got = RunOp(op, in);
        for (const std::string var : {"p", "v", "m1", "m2"}) {
          if (!in.count(var)) continue;
          EXPECT_EQ(CompareTensors(got->GetVar(var)->Get(), want->GetVar(var)->Get(), 1e-6, 1e-6), "") << var;
        }
      }
    }
  }
}

TEST(GradClipUpdateTest, BadClipInputsNameTheOp) {
  std::mt19937 rng(3);
  std::map<std::string, Tensor> in = UpdateInputs("sgd", 4, DataType::kFP32, rng);
  proto::OpDesc op = Update("sgd");
  SetInput(&op, "GradScale", {"s"});
  in["s"] = FloatTensor({2}, {1, 1});
  std::string e = ErrorOf([&] { RunOp(op, in); });
  EXPECT_NE(e.find("sgd"), std::string::npos) << e;
  EXPECT_NE(e.find("input GradScale: expected one element ([1]), got [2]"), std::string::npos) << e;
  op = Update("adam");
  SetAttr(&op, "grad_clip_min", 1.f);
  SetAttr(&op, "grad_clip_max", -1.f);
  e = ErrorOf([&] { RunOp(op, UpdateInputs("adam", 4, DataType::kFP32, rng)); });
  EXPECT_NE(e.find("adam"), std::string::npos) << e;
  EXPECT_NE(e.find("grad_clip_min, grad_clip_max: expected min <= max, got 1, -1"), std::string::npos) << e;
}

// ---- AppendOptimizer -----------------------------------------------------------------

TEST(GradClipBuilderTest, GlobalNormIsOneOpBeforeTheUpdatesThatReadItsScale) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b, {-1, false});
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.grad_clip_norm = 0.5f;
  AppendOptimizer(b, params, c);
  const auto& ops = b.main().blocks(0).ops();
  int clip_at = -1, updates = 0;
  std::string scale;
  for (int i = 0; i < ops.size(); ++i) {
    if (ops[i].type() == "clip_by_global_norm") {
      ASSERT_EQ(clip_at, -1) << "one clip op";
      clip_at = i;
      EXPECT_TRUE(HasOpRole(ops[i], kOpRoleOptimize));
      EXPECT_EQ(InputArgs(ops[i], "X"), (std::vector<std::string>{params[0].second, params[1].second}));
      scale = OutputArgs(ops[i], "Scale")[0];
    }
    if (ops[i].type() != "adam") continue;
    ++updates;
    EXPECT_GT(i, clip_at);
    EXPECT_GE(clip_at, 0);
    EXPECT_EQ(InputArgs(ops[i], "GradScale"), std::vector<std::string>{scale});
    EXPECT_EQ(FindAttr(ops[i], "grad_clip_min"), nullptr);
  }
  EXPECT_EQ(updates, 2);
  const proto::VarDesc* v = FindVarDesc(b.main().blocks(0), scale);
  ASSERT_NE(v, nullptr);
  EXPECT_FALSE(v->persistable());

  // It runs, and with clip_norm far above the norm the step is the unclipped one.
  auto run = [&](float clip_norm) {
    ProgramBuilder pb(1);
    const auto pg = test::BuildLinearLoss(pb, {-1, false});
    OptimizerConfig oc;
    oc.grad_clip_norm = clip_norm;
    AppendOptimizer(pb, pg, oc);
    Scope scope;
    Executor().RunProgram(pb.startup(), scope);
    FeedTensor(pb.main().blocks(0), scope, "x", FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}));
    Executor().RunProgram(pb.main(), scope);
    Tensor w;
    w.CopyFrom(scope.GetVar("w")->Get());
    return w;
  };
  const Tensor plain = run(0.f), loose = run(1e6f), tight = run(0.01f);
  EXPECT_EQ(CompareTensors(loose, plain, 0, 0), "");
  EXPECT_NE(CompareTensors(tight, plain, 1e-6, 0), "");
}

// Under gradient merge the norm is that of the merged gradients the updates
// read: every grad_merge, then the clip, then the gated updates.
TEST(GradClipBuilderTest, UnderGradientMergeTheNormIsOfTheMergedGradients) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b, {-1, false});
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.grad_clip_norm = 0.5f;
  c.grad_merge_steps = 2;
  AppendOptimizer(b, params, c);
  std::vector<std::string> order, merged;
  for (const auto& op : b.main().blocks(0).ops()) {
    if (op.type() == "grad_merge" || op.type() == "clip_by_global_norm" || op.type() == "adam") {
      order.push_back(op.type());
    }
    if (op.type() == "grad_merge") merged.push_back(OutputArgs(op, "Out")[0]);
    if (op.type() == "clip_by_global_norm") {
      EXPECT_EQ(InputArgs(op, "X"), merged);
    }
    if (op.type() == "adam") {
      EXPECT_EQ(InputArgs(op, "GradScale").size(), 1u);
      EXPECT_EQ(InputArgs(op, "Apply").size(), 1u);
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"grad_merge", "grad_merge", "clip_by_global_norm", "adam", "adam"}));
}

TEST(GradClipBuilderTest, ValueClipIsTwoAttributesAndNoOp) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b, {-1, false});
  OptimizerConfig c;
  c.kind = OptimizerKind::kMomentum;
  c.grad_clip_min = -0.5f;
  c.grad_clip_max = 0.5f;
  AppendOptimizer(b, params, c);
  int updates = 0;
  for (const auto& op : b.main().blocks(0).ops()) {
    EXPECT_NE(op.type(), "clip_by_global_norm");
    if (op.type() != "momentum") continue;
    ++updates;
    EXPECT_TRUE(InputArgs(op, "GradScale").empty());
    EXPECT_EQ(std::get<float>(AttrFromProto(*FindAttr(op, "grad_clip_min"))), -0.5f);
    EXPECT_EQ(std::get<float>(AttrFromProto(*FindAttr(op, "grad_clip_max"))), 0.5f);
  }
  EXPECT_EQ(updates, 2);
}

TEST(GradClipBuilderTest, BadSettingsAreErrorsThatChangeNothing) {
  ProgramBuilder b(1);
  const auto params = test::BuildLinearLoss(b, {-1, false});
  const int ops_before = b.main().blocks(0).ops_size();
  OptimizerConfig c;
  c.grad_clip_norm = -1.f;
  std::string e = ErrorOf([&] { AppendOptimizer(b, params, c); });
  EXPECT_NE(e.find("grad_clip_norm (ClipGradByGlobalNorm's clip_norm) must be finite and > 0"), std::string::npos)
      << e;
  c.grad_clip_norm = std::numeric_limits<float>::quiet_NaN();
  e = ErrorOf([&] { AppendOptimizer(b, params, c); });
  EXPECT_NE(e.find("grad_clip_norm"), std::string::npos) << e;
  c.grad_clip_norm = 0.f;
  c.grad_clip_min = 1.f;
  c.grad_clip_max = 1.f;
  e = ErrorOf([&] { AppendOptimizer(b, params, c); });
  EXPECT_NE(e.find("min must be below max, got min 1, max 1"), std::string::npos) << e;
  EXPECT_EQ(b.main().blocks(0).ops_size(), ops_before);
}

}  // namespace
}  // namespace kiln
