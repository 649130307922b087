#include "framework/backward.h"

#include <gtest/gtest.h>

#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

// x feeds two ops (fan-out): tanh(x) and x*x; loss = mean(t + xx); then an sgd
// op after the loss that reads w@GRAD.
const char* kFanOut = R"pb(
version: 1
blocks {
  idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP32 dims: 3 dims: 4 }
  vars { name: "w" dtype: FP32 dims: 3 dims: 4 persistable: true }
  vars { name: "lr" dtype: FP32 dims: 1 persistable: true }
  vars { name: "xw" dtype: FP32 dims: 3 dims: 4 }
  vars { name: "t" dtype: FP32 dims: 3 dims: 4 }
  vars { name: "sq" dtype: FP32 dims: 3 dims: 4 }
  vars { name: "s" dtype: FP32 dims: 3 dims: 4 }
  vars { name: "loss" dtype: FP32 dims: 1 }
  ops { type: "elementwise_mul" inputs { name: "X" args: "x" } inputs { name: "Y" args: "w" } outputs { name: "Out" args: "xw" } }
  ops { type: "tanh" inputs { name: "X" args: "xw" } outputs { name: "Out" args: "t" } }
  ops { type: "elementwise_mul" inputs { name: "X" args: "xw" } inputs { name: "Y" args: "xw" } outputs { name: "Out" args: "sq" } }
  ops { type: "elementwise_add" inputs { name: "X" args: "t" } inputs { name: "Y" args: "sq" } outputs { name: "Out" args: "s" } }
  ops { type: "mean" inputs { name: "X" args: "s" } outputs { name: "Out" args: "loss" } }
  ops { type: "sgd" inputs { name: "Param" args: "w" } inputs { name: "Grad" args: "w@GRAD" }
        inputs { name: "LearningRate" args: "lr" } outputs { name: "ParamOut" args: "w" } }
}
)pb";

TEST(BackwardTest, FanOutIsSummedAndInsertedBeforeOptimizer) {
  proto::ProgramDesc p = ParseProgramText(kFanOut, "fan_out");
  auto params = AppendBackward(&p, "loss");
  ValidateProgram(p);
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "w");
  EXPECT_EQ(params[0].second, "w@GRAD");
  const proto::BlockDesc& b = p.blocks(0);
  // Forward ops keep their places; the first backward op fills loss@GRAD.
  EXPECT_EQ(b.ops(4).type(), "mean");
  EXPECT_EQ(b.ops(5).type(), "fill_constant");
  EXPECT_EQ(OutputArgs(b.ops(5), "Out")[0], "loss@GRAD");
  // The optimizer stays last.
  EXPECT_EQ(b.ops(b.ops_size() - 1).type(), "sgd");
  // xw feeds tanh and (twice) the square: three partial grads summed by one sum op.
  int sums_of_xw = 0;
  for (const auto& op : b.ops()) {
    if (op.type() == "sum" && OutputArgs(op, "Out")[0] == "xw@GRAD") {
      ++sums_of_xw;
      EXPECT_EQ(InputArgs(op, "X").size(), 3u);
    }
  }
  EXPECT_EQ(sums_of_xw, 1);
  EXPECT_NE(FindVarDesc(b, "xw@GRAD@RENAME@0"), nullptr);
  // Every gradient is declared like its forward var.
  const proto::VarDesc* wg = FindVarDesc(b, "w@GRAD");
  ASSERT_NE(wg, nullptr);
  EXPECT_EQ(VarDims(*wg), (Dims{3, 4}));
}

TEST(BackwardTest, GradientsMatchFiniteDifferences) {
  proto::ProgramDesc p = ParseProgramText(kFanOut, "fan_out");
  // Drop the sgd op: check the gradients themselves.
  p.mutable_blocks(0)->mutable_ops()->RemoveLast();
  AppendBackward(&p, "loss");
  std::mt19937 rng(3);
  std::map<std::string, Tensor> in = {{"x", test::RandomTensor({3, 4}, DataType::kFP64, rng)},
                                      {"w", test::RandomTensor({3, 4}, DataType::kFP64, rng)}};
  std::vector<proto::OpDesc> ops(p.blocks(0).ops().begin(), p.blocks(0).ops().end());
  auto scope = test::RunOps(ops, in, false);
  const Tensor& wg = scope->GetVar("w@GRAD")->Get();
  const Tensor& xg = scope->GetVar("x@GRAD")->Get();
  // loss = mean(tanh(xw) + (xw)^2), xw = x*w: dL/dw = x*(1-tanh^2 + 2xw)/12.
  for (int64_t i = 0; i < 12; ++i) {
    const double x = in["x"].data<double>()[i], w = in["w"].data<double>()[i], xw = x * w;
    const double common = (1 - std::tanh(xw) * std::tanh(xw) + 2 * xw) / 12.0;
    EXPECT_NEAR(wg.data<double>()[i], x * common, 1e-12);
    EXPECT_NEAR(xg.data<double>()[i], w * common, 1e-12);
  }
}

TEST(BackwardTest, StopGradientAndIntegerVarsGetNoGradient) {
  proto::ProgramDesc p = ParseProgramText(kFanOut, "fan_out");
  p.mutable_blocks(0)->mutable_vars(0)->set_stop_gradient(true);  // x
  AppendBackward(&p, "loss");
  EXPECT_EQ(FindVarDesc(p.blocks(0), "x@GRAD"), nullptr);
  EXPECT_NE(FindVarDesc(p.blocks(0), "w@GRAD"), nullptr);
  for (const auto& op : p.blocks(0).ops()) {
    for (const auto& a : AllOutputArgs(op)) EXPECT_NE(a, "x@GRAD");
  }
}

TEST(BackwardTest, UnknownLossIsAnError) {
  proto::ProgramDesc p = ParseProgramText(kFanOut, "fan_out");
  try {
    AppendBackward(&p, "nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss variable 'nope' is not declared"), std::string::npos) << e.what();
  }
  try {
    AppendBackward(&p, "lr");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no op writes the loss 'lr'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
