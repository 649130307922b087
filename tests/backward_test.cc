#include "framework/backward.h"

#include <gtest/gtest.h>

#include <set>

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

// reduce_max, a comparison, where, arg_max, one_hot, gather, reduce_min and
// cast on the way from w to the loss (all f64, for finite differences):
// s = where(h < max(h), h - max(h), h / 2) plus the one-hot of each row's
// arg_max; loss = mean(cast(reduce_min(gather(s, idx)))).
const char* kIndexOps = R"pb(
version: 1
blocks {
  idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP64 dims: 4 dims: 5 stop_gradient: true }
  vars { name: "w" dtype: FP64 dims: 5 dims: 5 persistable: true }
  vars { name: "idx" dtype: INT64 dims: 3 }
  vars { name: "h" dtype: FP64 dims: 4 dims: 5 }
  vars { name: "m" dtype: FP64 dims: 4 dims: 1 }
  vars { name: "c" dtype: BOOL dims: 4 dims: 5 }
  vars { name: "d" dtype: FP64 dims: 4 dims: 5 }
  vars { name: "hs" dtype: FP64 dims: 4 dims: 5 }
  vars { name: "s" dtype: FP64 dims: 4 dims: 5 }
  vars { name: "a" dtype: INT64 dims: 4 dims: 1 }
  vars { name: "oh" dtype: FP32 dims: 4 dims: 5 }
  vars { name: "oh64" dtype: FP64 dims: 4 dims: 5 }
  vars { name: "so" dtype: FP64 dims: 4 dims: 5 }
  vars { name: "g" dtype: FP64 dims: 3 dims: 5 }
  vars { name: "gm" dtype: FP64 dims: 3 }
  vars { name: "gc" dtype: FP64 dims: 3 }
  vars { name: "loss" dtype: FP64 dims: 1 }
  ops { type: "matmul" inputs { name: "X" args: "x" } inputs { name: "Y" args: "w" } outputs { name: "Out" args: "h" } }
  ops { type: "reduce_max" inputs { name: "X" args: "h" } outputs { name: "Out" args: "m" }
        attrs { name: "dim" type: INTS ints: 1 } attrs { name: "keep_dim" type: BOOL b: true } }
  ops { type: "less_than" inputs { name: "X" args: "h" } inputs { name: "Y" args: "m" } outputs { name: "Out" args: "c" } }
  ops { type: "elementwise_sub" inputs { name: "X" args: "h" } inputs { name: "Y" args: "m" } outputs { name: "Out" args: "d" } }
  ops { type: "scale" inputs { name: "X" args: "h" } outputs { name: "Out" args: "hs" } attrs { name: "scale" type: FLOAT f: 0.5 } }
  ops { type: "where" inputs { name: "Condition" args: "c" } inputs { name: "X" args: "d" } inputs { name: "Y" args: "hs" }
        outputs { name: "Out" args: "s" } }
  ops { type: "arg_max" inputs { name: "X" args: "h" } outputs { name: "Out" args: "a" }
        attrs { name: "axis" type: INT i: 1 } attrs { name: "keepdims" type: BOOL b: true } }
  ops { type: "one_hot" inputs { name: "X" args: "a" } outputs { name: "Out" args: "oh" } attrs { name: "depth" type: INT i: 5 } }
  ops { type: "cast" inputs { name: "X" args: "oh" } outputs { name: "Out" args: "oh64" }
        attrs { name: "in_dtype" type: INT i: 0 } attrs { name: "out_dtype" type: INT i: 3 } }
  ops { type: "elementwise_add" inputs { name: "X" args: "s" } inputs { name: "Y" args: "oh64" } outputs { name: "Out" args: "so" } }
  ops { type: "gather" inputs { name: "X" args: "so" } inputs { name: "Index" args: "idx" } outputs { name: "Out" args: "g" } }
  ops { type: "reduce_min" inputs { name: "X" args: "g" } outputs { name: "Out" args: "gm" } attrs { name: "dim" type: INTS ints: 1 } }
  ops { type: "cast" inputs { name: "X" args: "gm" } outputs { name: "Out" args: "gc" }
        attrs { name: "in_dtype" type: INT i: 3 } attrs { name: "out_dtype" type: INT i: 3 } }
  ops { type: "mean" inputs { name: "X" args: "gc" } outputs { name: "Out" args: "loss" } }
}
)pb";

// The ops without a gradient stop it (their integer and bool vars get none)
// instead of failing, and w@GRAD matches finite differences of the loss.
TEST(BackwardTest, IndexAndComparisonOpsStopTheGradient) {
  const proto::ProgramDesc forward = ParseProgramText(kIndexOps, "index_ops");
  proto::ProgramDesc p = forward;
  const auto params = AppendBackward(&p, "loss");
  ValidateProgram(p);
  ASSERT_EQ(params.size(), 1u);
  std::set<std::string> types;
  for (const auto& op : p.blocks(0).ops()) types.insert(op.type());
  for (const char* t : {"reduce_max_grad", "where_grad", "gather_grad", "reduce_min_grad"}) {
    EXPECT_TRUE(types.count(t)) << t;
  }
  for (const char* v : {"c@GRAD", "a@GRAD", "idx@GRAD", "x@GRAD"}) EXPECT_EQ(FindVarDesc(p.blocks(0), v), nullptr) << v;

  std::mt19937 rng(5);
  std::map<std::string, Tensor> in = {{"x", test::RandomTensor({4, 5}, DataType::kFP64, rng)},
                                      {"w", test::RandomTensor({5, 5}, DataType::kFP64, rng)},
                                      {"idx", test::Int64Tensor({3}, {2, 0, 2})}};
  auto run = [](const proto::ProgramDesc& prog, const std::map<std::string, Tensor>& feeds) {
    return test::RunOps({prog.blocks(0).ops().begin(), prog.blocks(0).ops().end()}, feeds, false);
  };
  auto scope = run(p, in);
  Tensor wg;
  wg.CopyFrom(scope->GetVar("w@GRAD")->Get());
  int nonzero = 0;
  for (int64_t i = 0; i < 25; ++i) {
    std::map<std::string, Tensor> moved;
    for (const auto& [name, t] : in) moved[name].CopyFrom(t);
    const double eps = 1e-6;
    moved["w"].data<double>()[i] += eps;
    const double lp = run(forward, moved)->GetVar("loss")->Get().data<double>()[0];
    moved["w"].data<double>()[i] -= 2 * eps;
    const double lm = run(forward, moved)->GetVar("loss")->Get().data<double>()[0];
    EXPECT_NEAR(wg.data<double>()[i], (lp - lm) / (2 * eps), 1e-6) << "w@GRAD[" << i << "]";
    nonzero += wg.data<double>()[i] != 0;
  }
  EXPECT_GT(nonzero, 0);
}

TEST(BackwardTest, NonFloatLossIsAnError) {
  proto::ProgramDesc p = ParseProgramText(kIndexOps, "index_ops");
  try {
    AppendBackward(&p, "a");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss 'a' has dtype i64; expected f32 or f64"), std::string::npos)
        << e.what();
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
