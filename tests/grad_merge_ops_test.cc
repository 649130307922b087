// grad_merge_step, grad_merge and the updates' Apply flag (apply_gate.h):
// the counter over several cycles, accumulation and reset, updates that
// keep every state bit for bit at Apply 0 (in place and not) and are
// unchanged at 1, lr_schedule counting updates, errors, and the generated
// kernels against the reference kernels on both ISAs, alone and fused with
// each update at odd sizes; a gated sgd is not folded into its matmul_grad.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"
#include "tests/unary_op_test_util.h"

namespace kiln {
namespace {

using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::RunOp;
using test::ValueAt;

Tensor Scalar(float v) { return FloatTensor({1}, {v}); }

Tensor Get(const Scope& scope, const std::string& name) {
  Tensor t;
  t.CopyFrom(scope.GetVar(name)->Get());
  return t;
}

proto::OpDesc StepOp(int64_t k) {
  return OpBuilder("grad_merge_step").In("Step", {"s"}).Out("StepOut", {"s"}).Out("Apply", {"ap"}).Attr("k_steps", k).Build();
}

proto::OpDesc MergeOp(int64_t k, bool avg) {
  return OpBuilder("grad_merge")
      .In("Grad", {"g"})
      .In("Acc", {"acc"})
      .In("Apply", {"ap"})
      .Out("Out", {"m"})
      .Out("AccOut", {"acc"})
      .Attr("k_steps", k)
      .Attr("avg", avg)
      .Build();
}

// ---- grad_merge_step ------------------------------------------------------------------

TEST(GradMergeStepTest, AppliesOnEveryKthStepOverSeveralCycles) {
  for (int64_t k : {1, 2, 3}) {
    Tensor s = Scalar(0);
    for (int i = 0; i < 3 * static_cast<int>(k) + 1; ++i) {
      auto scope = RunOp(StepOp(k), {{"s", s}});
      const bool apply = (i + 1) % k == 0;
      EXPECT_EQ(ValueAt(Get(*scope, "ap"), 0), apply ? 1.0 : 0.0) << "k=" << k << " step " << i;
      s = Get(*scope, "s");
      EXPECT_EQ(ValueAt(s, 0), (i + 1) % k) << "k=" << k << " step " << i;
    }
  }
}

// A counter past k (a checkpoint of a larger k) applies at once and restarts.
TEST(GradMergeStepTest, ACounterPastKAppliesAtOnce) {
  auto scope = RunOp(StepOp(3), {{"s", Scalar(7)}});
  EXPECT_EQ(ValueAt(Get(*scope, "ap"), 0), 1.0);
  EXPECT_EQ(ValueAt(Get(*scope, "s"), 0), 0.0);
}

TEST(GradMergeStepTest, Errors) {
  std::string e = ErrorOf([] { RunOp(StepOp(0), {{"s", Scalar(0)}}); });
  EXPECT_NE(e.find("attribute k_steps: expected >= 1, got 0"), std::string::npos) << e;
  e = ErrorOf([] { RunOp(StepOp(2), {{"s", FloatTensor({2}, {0, 0})}}); });
  EXPECT_NE(e.find("input Step: expected one element ([1]), got [2]"), std::string::npos) << e;
}

// ---- grad_merge -----------------------------------------------------------------------

TEST(GradMergeTest, AccumulatesGivesTheMeanAndResetsOnApply) {
  const Tensor acc = FloatTensor({3}, {1, 2, -3});
  const Tensor g = FloatTensor({3}, {0.5f, 4, 1});
  for (float apply : {0.f, 1.f}) {
    for (bool avg : {true, false}) {
      auto scope = RunOp(MergeOp(4, avg), {{"g", g}, {"acc", acc}, {"ap", Scalar(apply)}});
      const std::vector<float> sum = {1.5f, 6, -2};
      std::vector<float> merged = sum;
      if (avg) {
        for (float& v : merged) v /= 4;
      }
      EXPECT_EQ(CompareTensors(Get(*scope, "m"), FloatTensor({3}, merged), 0, 0), "") << apply << avg;
      EXPECT_EQ(CompareTensors(Get(*scope, "acc"), apply != 0 ? FloatTensor({3}, {0, 0, 0}) : FloatTensor({3}, sum), 0, 0),
                "")
          << apply << avg;
    }
  }
  // f64 too: the same per element.
  auto scope = RunOp(MergeOp(2, true), {{"g", test::CastTo(g, DataType::kFP64)},
                                        {"acc", test::CastTo(acc, DataType::kFP64)},
                                        {"ap", Scalar(0)}});
  EXPECT_EQ(ValueAt(Get(*scope, "m"), 1), 3.0);
  EXPECT_EQ(ValueAt(Get(*scope, "acc"), 2), -2.0);
}

TEST(GradMergeTest, Errors) {
  const Tensor g = FloatTensor({3}, {1, 2, 3});
  std::string e = ErrorOf([&] { RunOp(MergeOp(2, true), {{"g", g}, {"acc", FloatTensor({2}, {0, 0})}, {"ap", Scalar(1)}}); });
  EXPECT_NE(e.find("input Acc: expected dims [3] (as Grad), got [2]"), std::string::npos) << e;
  e = ErrorOf([&] { RunOp(MergeOp(2, true), {{"g", g}, {"acc", g}, {"ap", FloatTensor({2}, {1, 1})}}); });
  EXPECT_NE(e.find("input Apply: expected one element ([1]), got [2]"), std::string::npos) << e;
  e = ErrorOf([&] { RunOp(MergeOp(-1, true), {{"g", g}, {"acc", g}, {"ap", Scalar(1)}}); });
  EXPECT_NE(e.find("attribute k_steps: expected >= 1, got -1"), std::string::npos) << e;
}

// ---- updates with Apply -------------------------------------------------------------------

// One update op of `type` on p [n] and its state, reading gradient `grad`;
// `suffix` names the outputs ("" for in place). Inputs: its state vars
// (state.first) and outputs (state.second).
struct Update {
  proto::OpDesc op;
  std::vector<std::pair<std::string, std::string>> state;  // input var, output var
};

Update MakeUpdate(const std::string& type, const std::string& grad, bool with_apply, const std::string& suffix = "") {
  OpBuilder op(type);
  Update u;
  auto state = [&](const std::string& in_slot, const std::string& out_slot, const std::string& var) {
    op.In(in_slot, {var}).Out(out_slot, {var + suffix});
    u.state.push_back({var, var + suffix});
  };
  state("Param", "ParamOut", "p");
  op.In("Grad", {grad}).In("LearningRate", {"lr"});
  if (type == "momentum") {
    state("Velocity", "VelocityOut", "v");
    op.Attr("use_nesterov", true);
  }
  if (type == "adam" || type == "adamw") {
    state("Moment1", "Moment1Out", "m1");
    state("Moment2", "Moment2Out", "m2");
    state("Beta1Pow", "Beta1PowOut", "b1p");
    state("Beta2Pow", "Beta2PowOut", "b2p");
  }
  if (type == "sgd" || type == "adam") op.Attr("regularization_coeff", 0.05f);
  if (with_apply) op.In("Apply", {"ap"});
  u.op = op.Build();
  return u;
}

// Inputs of MakeUpdate's ops over parameters of `dims` (Moment2 >= 0).
std::map<std::string, Tensor> UpdateInputs(const Dims& dims, std::mt19937& rng) {
  return {{"p", test::RandomTensor(dims, DataType::kFP32, rng, -2, 2)},
          {"g", test::RandomTensor(dims, DataType::kFP32, rng, -2, 2)},
          {"v", test::RandomTensor(dims, DataType::kFP32, rng, -1, 1)},
          {"m1", test::RandomTensor(dims, DataType::kFP32, rng, -1, 1)},
          {"m2", test::RandomTensor(dims, DataType::kFP32, rng, 0, 2)},
          {"lr", Scalar(0.01f)},
          {"b1p", Scalar(0.9f * 0.9f)},
          {"b2p", Scalar(0.999f * 0.999f)}};
}

const std::vector<std::string> kUpdates = {"sgd", "momentum", "adam", "adamw"};

TEST(ApplyGateTest, ApplyZeroKeepsEveryStateBitForBitAndOneIsThePlainUpdate) {
  std::mt19937 rng(3);
  for (const std::string& type : kUpdates) {
    for (const std::string suffix : {"", "_new"}) {
      SCOPED_TRACE(type + (suffix.empty() ? " in place" : " out of place"));
      std::map<std::string, Tensor> in = UpdateInputs({17}, rng);
      const Update gated = MakeUpdate(type, "g", true, suffix);
      in["ap"] = Scalar(0);
      auto kept = RunOp(gated.op, in);
      for (const auto& [from, to] : gated.state) EXPECT_EQ(CompareTensors(Get(*kept, to), in.at(from), 0, 0), "") << to;
      in["ap"] = Scalar(1);
      auto applied = RunOp(gated.op, in);
      auto plain = RunOp(MakeUpdate(type, "g", false, suffix).op, in);
      for (const auto& [from, to] : gated.state) {
        EXPECT_EQ(CompareTensors(Get(*applied, to), Get(*plain, to), 0, 0), "") << to;
        // The update does change the state (the test would pass vacuously otherwise).
        EXPECT_NE(CompareTensors(Get(*applied, to), in.at(from), 0, 0), "") << to;
      }
    }
  }
}

TEST(ApplyGateTest, ApplyMustBeOneElement) {
  std::mt19937 rng(4);
  std::map<std::string, Tensor> in = UpdateInputs({5}, rng);
  in["ap"] = FloatTensor({2}, {1, 1});
  const std::string e = ErrorOf([&] { RunOp(MakeUpdate("sgd", "g", true).op, in); });
  EXPECT_NE(e.find("input Apply: expected one element ([1]), got [2]"), std::string::npos) << e;
}

// The schedule counts updates: Step advances only where Apply is nonzero.
TEST(ApplyGateTest, LrScheduleAdvancesOnlyOnApply) {
  const proto::OpDesc op = OpBuilder("lr_schedule")
                               .In("Step", {"s"})
                               .In("Apply", {"ap"})
                               .Out("LearningRate", {"lr"})
                               .Out("StepOut", {"s"})
                               .Attr("kind", std::string("exponential"))
                               .Attr("learning_rate", 1.0f)
                               .Attr("gamma", 0.5f)
                               .Build();
  for (float apply : {0.f, 1.f}) {
    auto scope = RunOp(op, {{"s", Scalar(2)}, {"ap", Scalar(apply)}});
    EXPECT_EQ(ValueAt(Get(*scope, "lr"), 0), 0.25);
    EXPECT_EQ(ValueAt(Get(*scope, "s"), 0), apply != 0 ? 3.0 : 2.0);
  }
}

// ---- generated kernels ----------------------------------------------------------------

const std::vector<Dims> kShapes = {{1}, {15}, {17}, {4099}, {3, 5, 7}};

TEST(GradMergeJitTest, GradMergeMatchesTheReferenceOnBothIsas) {
  for (Isa isa : test::TestedIsas()) {
    for (const Dims& dims : kShapes) {
      for (float apply : {0.f, 1.f}) {
        for (bool avg : {true, false}) {
          SCOPED_TRACE(DimsToString(dims) + " apply=" + std::to_string(apply) + " avg=" + std::to_string(avg) + " " +
                       IsaName(isa));
          test::LoweringCase c;
          c.name = "grad_merge";
          c.options.isa = isa;
          c.ops = {MergeOp(3, avg)};
          c.inputs = {{"g", dims}, {"acc", dims}, {"ap", {1}}};
          c.given = {{"ap", Scalar(apply)}};
          c.outputs = {"m", "acc"};
          const auto obj = test::CheckLoweringNumerics(c, 0, 0);
          ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
          EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
        }
      }
    }
  }
}

// grad_merge and the gated update it feeds: one generated kernel over the
// parameter (the merged gradient stays in registers), plus adam's [1]-sized
// beta-power kernel; the same values as the reference kernels.
TEST(GradMergeJitTest, GradMergeFusesWithEachGatedUpdate) {
  std::mt19937 rng(5);
  for (Isa isa : test::TestedIsas()) {
    for (const std::string& type : kUpdates) {
      for (const Dims& dims : kShapes) {
        for (float apply : {0.f, 1.f}) {
          SCOPED_TRACE(type + " " + DimsToString(dims) + " apply=" + std::to_string(apply) + " " + IsaName(isa));
          const Update u = MakeUpdate(type, "m", true);
          test::LoweringCase c;
          c.name = "grad_merge_" + type;
          c.options.isa = isa;
          c.ops = {MergeOp(3, true), u.op};
          std::map<std::string, Tensor> given = UpdateInputs(dims, rng);
          given["ap"] = Scalar(apply);
          c.inputs = {{"g", dims}, {"acc", dims}, {"ap", {1}}};
          for (const auto& [var, out] : u.state) {
            c.inputs.push_back({var, given.at(var).dims()});
            c.outputs.push_back(out);
          }
          c.inputs.push_back({"lr", {1}});
          c.outputs.push_back("acc");
          for (const auto& [name, dims_unused] : c.inputs) {
            if (name != "acc") c.given[name] = given.at(name);
          }
          // The generated updates fuse multiply-adds (one rounding) and adam's
          // reference computes its step size in double: jit_ops_test's kExact.
          const auto obj = test::CheckLoweringNumerics(c, 1e-6, 1e-5);
          const bool adam = type == "adam" || type == "adamw";
          const size_t kernels = adam && Numel(dims) > 1 ? 2 : 1;
          ASSERT_EQ(obj->program.instructions.size(), kernels) << obj->Listing();
          for (const auto& ins : obj->program.instructions) {
            EXPECT_EQ(ins.kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
          }
        }
      }
    }
  }
}

// The weight-gradient fold (W -= lr * X^T dY in one oneDNN matmul) has no
// select: an sgd with Apply, even one reading the raw weight gradient,
// stays a generated update. Apply 0 leaves W as it was.
TEST(GradMergeJitTest, AGatedSgdIsNotFoldedIntoItsMatmul) {
  for (float apply : {0.f, 1.f}) {
    test::LoweringCase plain = test::GradAndSgd("sgd_fold", 8, 17, 5, false);
    const auto folded = test::LowerCase(plain);
    ASSERT_TRUE(test::StepMatched(*folded, "weight_grad_fold")) << folded->lowering;
    test::LoweringCase c = test::GradAndSgd("gated_sgd_fold", 8, 17, 5, false);
    SetInput(&c.ops[1], "Apply", {"ap"});
    c.inputs.push_back({"ap", {1}});
    c.given = {{"ap", Scalar(apply)}};
    const auto obj = test::CheckLoweringNumerics(c, 1e-5, 1e-5);
    EXPECT_FALSE(test::StepMatched(*obj, "weight_grad_fold")) << obj->lowering;
  }
}

}  // namespace
}  // namespace kiln
