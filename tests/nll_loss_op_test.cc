// nll_loss: values of the three reductions with and without Weight and an
// ignored label (hand-computed), the [N, C, d1, d2] layout against a loop
// over its indices, i32 labels, Total_weight, a mean of all-ignored labels,
// grads by finite differences, the grad without Out@GRAD, the errors, and
// the framework kernels inside a cluster.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::Int64Tensor;

proto::OpDesc NllLoss(const std::string& reduction, bool weight = false, int64_t ignore_index = -100,
                      bool total = false) {
  OpBuilder b("nll_loss");
  b.In("X", {"x"}).In("Label", {"label"}).Out("Out", {"out"});
  b.Attr("reduction", reduction).Attr("ignore_index", ignore_index);
  if (weight) b.In("Weight", {"w"});
  if (total) b.Out("Total_weight", {"total"});
  return b.Build();
}

// X [3, 4] of log-probabilities, labels 1, 3, 0; the third is ignored when
// ignore_index is 0.
const Tensor kX = FloatTensor({3, 4}, {-1.0f, -2.0f, -3.0f, -4.0f,  //
                                       -0.5f, -1.5f, -2.5f, -3.5f,  //
                                       -0.25f, -0.75f, -1.25f, -1.75f});
const Tensor kLabel = Int64Tensor({3}, {1, 3, 0});
const Tensor kWeight = FloatTensor({4}, {0.5f, 2.0f, 1.0f, 4.0f});

TEST(NllLossOpTest, ReductionsWeightsAndIgnoredLabels) {
  auto run = [](const proto::OpDesc& op, bool weight) {
    std::map<std::string, Tensor> in = {{"x", kX}, {"label", kLabel}};
    if (weight) in["w"] = kWeight;
    return test::RunAndGet(op, in, "out");
  };
  EXPECT_EQ(CompareTensors(run(NllLoss("none"), false), FloatTensor({3}, {2.0f, 3.5f, 0.25f}), 0, 0), "");
  // Weighted: 2 * 2, 4 * 3.5, 0.5 * 0.25.
  EXPECT_EQ(CompareTensors(run(NllLoss("none", true), true), FloatTensor({3}, {4.0f, 14.0f, 0.125f}), 0, 0), "");
  EXPECT_EQ(CompareTensors(run(NllLoss("sum", true), true), FloatTensor({}, {18.125f}), 0, 0), "");
  EXPECT_EQ(CompareTensors(run(NllLoss("mean", true), true), FloatTensor({}, {18.125f / 6.5f}), 1e-7, 0), "");
  EXPECT_EQ(CompareTensors(run(NllLoss("mean"), false), FloatTensor({}, {5.75f / 3}), 1e-7, 0), "");
  // Label 0 ignored: its loss is 0 and its weight leaves the mean's divisor.
  EXPECT_EQ(CompareTensors(run(NllLoss("none", true, 0), true), FloatTensor({3}, {4.0f, 14.0f, 0}), 0, 0), "");
  EXPECT_EQ(CompareTensors(run(NllLoss("mean", true, 0), true), FloatTensor({}, {18.0f / 6.0f}), 1e-7, 0), "");
  EXPECT_EQ(CompareTensors(run(NllLoss("mean", false, 0), false), FloatTensor({}, {5.5f / 2}), 1e-7, 0), "");
}

TEST(NllLossOpTest, TotalWeightIsTheSumOfTheKeptWeightsForEveryReduction) {
  for (const char* r : {"none", "sum", "mean"}) {
    auto scope = test::RunOp(NllLoss(r, true, 3, true), {{"x", kX}, {"label", kLabel}, {"w", kWeight}});
    EXPECT_EQ(CompareTensors(scope->GetVar("total")->Get(), FloatTensor({}, {2.5f}), 0, 0), "") << r;
  }
  // Every label ignored: the mean is 0 / 0.
  const Tensor out = test::RunAndGet(NllLoss("mean", false, 7), {{"x", kX}, {"label", Int64Tensor({3}, {7, 7, 7})}}, "out");
  EXPECT_TRUE(std::isnan(out.data<float>()[0]));
}

// X [2, 3, 2, 2]: the class is dim 1, so label element (n, h, w) reads
// X[n, label, h, w]; i32 labels and f64 X as well.
TEST(NllLossOpTest, HigherRanksReadTheClassAlongDimOne) {
  std::mt19937 rng(21);
  const Tensor x = test::RandomTensor({2, 3, 2, 2}, DataType::kFP64, rng, -3, 0);
  const std::vector<int32_t> labels = {0, 2, 1, 1, 2, 2, 0, 1};
  const Tensor label = test::TypedTensor<int32_t>({2, 2, 2}, labels);
  Tensor want(DataType::kFP64, {2, 2, 2});
  for (int n = 0; n < 2; ++n) {
    for (int hw = 0; hw < 4; ++hw) {
      const int cls = labels[n * 4 + hw];
      want.mutable_data<double>()[n * 4 + hw] = -x.data<double>()[(n * 3 + cls) * 4 + hw];
    }
  }
  EXPECT_EQ(CompareTensors(test::RunAndGet(NllLoss("none"), {{"x", x}, {"label", label}}, "out"), want, 0, 0), "");
}

TEST(NllLossOpTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(22);
  const Tensor x = test::RandomTensor({3, 4, 2}, DataType::kFP64, rng, -3, 0);
  const Tensor label = Int64Tensor({3, 2}, {1, 3, 0, 2, 2, 3});
  const Tensor w = test::RandomTensor({4}, DataType::kFP64, rng, 0.5, 2);
  for (const char* r : {"none", "sum", "mean"}) {
    EXPECT_EQ(CheckGrad(NllLoss(r), {{"x", x}, {"label", label}}, {"x"}, {"out"}), "") << r;
    EXPECT_EQ(CheckGrad(NllLoss(r, true, 2), {{"x", x}, {"label", label}, {"w", w}}, {"x"}, {"out"}), "") << r;
  }
}

// Without Out@GRAD, X@GRAD is zeros; X is read for its dims only.
TEST(NllLossOpTest, GradWithoutOutGradIsZeros) {
  const OpInfo& info = OpRegistry::Global().Get("nll_loss_grad");
  EXPECT_EQ(info.no_need_buffer, std::vector<std::string>{"X"});
  const proto::OpDesc grad = OpRegistry::Global().Get("nll_loss").grad_maker(NllLoss("sum"))[0];
  proto::OpDesc no_dout = grad;
  no_dout.clear_inputs();
  for (const auto& in : grad.inputs()) {
    if (in.name() != "Out@GRAD") *no_dout.add_inputs() = in;
  }
  const Tensor dx = test::RunAndGet(no_dout, {{"x", kX}, {"label", kLabel}}, "x@GRAD");
  EXPECT_EQ(CompareTensors(dx, FloatTensor({3, 4}, std::vector<float>(12, 0.0f)), 0, 0), "");
}

TEST(NllLossOpTest, BadInputsNameTheOpAndWhatWasExpected) {
  auto error = [](const proto::OpDesc& op, const Tensor& x, const Tensor& label, const Tensor* w = nullptr) {
    std::map<std::string, Tensor> in = {{"x", x}, {"label", label}};
    if (w != nullptr) in["w"] = *w;
    return ErrorOf([&] { test::RunOp(op, in); });
  };
  std::string e = error(NllLoss("mean"), kX, Int64Tensor({3}, {1, 4, 0}));
  EXPECT_NE(e.find("'nll_loss': input Label: value 4 at position 1 (flat index into Label i64[3]) is outside [0, 4) "
                   "and is not ignore_index -100"),
            std::string::npos)
      << e;
  e = error(NllLoss("max"), kX, kLabel);
  EXPECT_NE(e.find("attribute reduction: expected \"none\", \"sum\" or \"mean\", got \"max\""), std::string::npos) << e;
  e = error(NllLoss("none"), kX, Int64Tensor({4}, {0, 0, 0, 0}));
  EXPECT_NE(e.find("input Label: expected dims [3] (X [3,4] without its class dim 1), got [4]"), std::string::npos) << e;
  const Tensor w3 = FloatTensor({3}, {1, 1, 1});
  e = error(NllLoss("none", true), kX, kLabel, &w3);
  EXPECT_NE(e.find("input Weight: expected dims [4] (one per class, dim 1 of X), got [3]"), std::string::npos) << e;
  e = error(NllLoss("none"), FloatTensor({4}, {1, 2, 3, 4}), Int64Tensor({1}, {0}));
  EXPECT_NE(e.find("input X: expected rank >= 2 ([N, C] or [N, C, d1, ...]), got [4]"), std::string::npos) << e;
  e = error(NllLoss("none"), kX, FloatTensor({3}, {0, 1, 2}));
  EXPECT_NE(e.find("input Label: expected dtype i64 or i32, got f32"), std::string::npos) << e;
  // The grad checks its labels too.
  const proto::OpDesc grad = OpRegistry::Global().Get("nll_loss").grad_maker(NllLoss("sum"))[0];
  e = ErrorOf([&] {
    test::RunOp(grad, {{"x", kX}, {"label", Int64Tensor({3}, {-1, 0, 0})}, {"out@GRAD", FloatTensor({}, {1})}});
  });
  EXPECT_NE(e.find("'nll_loss_grad': input Label: value -1 at position 0"), std::string::npos) << e;
}

TEST(NllLossOpJitTest, FrameworkKernelsRunInsideACluster) {
  EXPECT_EQ(OpRegistry::Global().Get("nll_loss").jit, JitLowering::kFramework);
  EXPECT_EQ(OpRegistry::Global().Get("nll_loss_grad").jit, JitLowering::kFramework);
  test::LoweringCase c;
  c.name = "nll_loss";
  const proto::OpDesc fwd = NllLoss("mean", true, 1);
  c.ops = {fwd, OpRegistry::Global().Get("nll_loss").grad_maker(fwd)[0]};
  c.inputs = {{"x", {4, 5, 3}}, {"label", {4, 3}}, {"w", {5}}, {"out@GRAD", {}}};
  c.dtypes = {{"label", DataType::kINT64}};
  c.given = {{"label", Int64Tensor({4, 3}, {0, 1, 2, 3, 4, 0, 1, 1, 2, 3, 4, 4})}};
  c.outputs = {"out", "x@GRAD"};
  const auto obj = test::CheckLoweringNumerics(c, 1e-6, 1e-6);
  ASSERT_EQ(obj->program.instructions.size(), 2u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name(), "nll_loss") << obj->Listing();
}

}  // namespace
}  // namespace kiln
