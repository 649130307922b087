// batch_norm and batch_norm_grad: values against the definition (PyTorch's
// training-mode arithmetic), the in-place running statistics, gradients
// against finite differences in training and is_test, the oneDNN kernels
// against the reference, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "framework/onednn/onednn_handler.h"
#include "framework/onednn/onednn_kernels.h"
#include "framework/op_registry.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::AllowSlowOneDnn;
using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

struct BnOptions {
  bool is_test = false;
  float momentum = 0.9f;
  float epsilon = 1e-5f;
  bool saved = true;     // SavedMean/SavedVariance outputs
  bool in_place = true;  // MeanOut is Mean, VarianceOut is Variance
};

proto::OpDesc BatchNormOp(const BnOptions& o = {}) {
  OpBuilder b("batch_norm");
  b.In("X", {"x"}).In("Scale", {"scale"}).In("Bias", {"bias"}).In("Mean", {"mean"}).In("Variance", {"var"});
  b.Out("Y", {"y"});
  b.Out("MeanOut", {o.in_place ? "mean" : "mean_out"}).Out("VarianceOut", {o.in_place ? "var" : "var_out"});
  if (o.saved) b.Out("SavedMean", {"saved_mean"}).Out("SavedVariance", {"saved_var"});
  return b.Attr("is_test", o.is_test).Attr("momentum", o.momentum).Attr("epsilon", o.epsilon).Build();
}

// X and the [C] inputs; the running variance stays positive.
std::map<std::string, Tensor> BnInputs(const Dims& x, DataType dtype, std::mt19937& rng) {
  const Dims c = {x[1]};
  return {{"x", RandomTensor(x, dtype, rng, -2, 3)},
          {"scale", RandomTensor(c, dtype, rng, 0.5, 1.5)},
          {"bias", RandomTensor(c, dtype, rng, -1, 1)},
          {"mean", RandomTensor(c, dtype, rng, -0.5, 0.5)},
          {"var", RandomTensor(c, dtype, rng, 0.5, 2)}};
}

struct Expected {
  Tensor y, mean_out, var_out, saved_mean, saved_inv_std;
};

// From the definition, in long double: per channel over N and the spatial
// dims, biased variance to normalise, unbiased one into the running variance.
Expected NaiveBatchNorm(const std::map<std::string, Tensor>& in, const BnOptions& o) {
  const Tensor& x = in.at("x");
  const int64_t n = x.dim(0), c = x.dim(1), s = x.numel() / (n * c), m = n * s;
  Expected e{Tensor(DataType::kFP64, x.dims()), Tensor(DataType::kFP64, {c}), Tensor(DataType::kFP64, {c}),
             Tensor(DataType::kFP64, {c}), Tensor(DataType::kFP64, {c})};
  for (int64_t ch = 0; ch < c; ++ch) {
    long double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < s; ++k) sum += ValueAt(x, (i * c + ch) * s + k);
    }
    const long double batch_mean = sum / m;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < s; ++k) sq += std::pow(ValueAt(x, (i * c + ch) * s + k) - batch_mean, 2);
    }
    const long double biased = sq / m, unbiased = sq / (m - 1);
    const long double run_mean = ValueAt(in.at("mean"), ch), run_var = ValueAt(in.at("var"), ch);
    const long double mean = o.is_test ? run_mean : batch_mean;
    const long double var = o.is_test ? run_var : biased;
    const long double inv_std = 1.0L / std::sqrt(var + o.epsilon);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < s; ++k) {
        const int64_t at = (i * c + ch) * s + k;
        e.y.mutable_data<double>()[at] = static_cast<double>(
            (ValueAt(x, at) - mean) * inv_std * ValueAt(in.at("scale"), ch) + ValueAt(in.at("bias"), ch));
      }
    }
    const long double mom = o.momentum;
    e.mean_out.mutable_data<double>()[ch] =
        static_cast<double>(o.is_test ? run_mean : mom * run_mean + (1 - mom) * batch_mean);
    e.var_out.mutable_data<double>()[ch] =
        static_cast<double>(o.is_test ? run_var : mom * run_var + (1 - mom) * unbiased);
    e.saved_mean.mutable_data<double>()[ch] = static_cast<double>(mean);
    e.saved_inv_std.mutable_data<double>()[ch] = static_cast<double>(inv_std);
  }
  return e;
}

const std::vector<Dims>& OddShapes() {
  static const std::vector<Dims> shapes = {{5, 3},     {2, 1},          {7, 17},      {2, 3, 5, 7}, {1, 4, 3, 3},
                                           {3, 5, 11}, {2, 2, 3, 4, 5}, {9, 1, 1, 2}, {4, 33, 2, 3}};
  return shapes;
}

TEST(BatchNormOpTest, MatchesDefinitionInTrainingAndIsTest) {
  std::mt19937 rng(1);
  for (const Dims& dims : OddShapes()) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      for (bool is_test : {false, true}) {
        SCOPED_TRACE(DimsToString(dims) + " " + DataTypeName(dtype) + (is_test ? " is_test" : " training"));
        BnOptions o;
        o.is_test = is_test;
        o.momentum = 0.8f;
        const auto in = BnInputs(dims, dtype, rng);
        const Expected want = NaiveBatchNorm(in, o);
        auto scope = RunOp(BatchNormOp(o), in);
        const double tol = dtype == DataType::kFP32 ? 2e-6 : 1e-12;
        auto got = [&](const char* name) { return test::CastTo(scope->GetVar(name)->Get(), DataType::kFP64); };
        EXPECT_EQ(scope->GetVar("y")->Get().dtype(), dtype);
        EXPECT_EQ(CompareTensors(got("y"), want.y, tol, tol), "");
        EXPECT_EQ(CompareTensors(got("mean"), want.mean_out, tol, tol), "");
        EXPECT_EQ(CompareTensors(got("var"), want.var_out, tol, tol), "");
        EXPECT_EQ(CompareTensors(got("saved_mean"), want.saved_mean, tol, tol), "");
        EXPECT_EQ(CompareTensors(got("saved_var"), want.saved_inv_std, tol, tol), "");
      }
    }
  }
}

// Hand-computed: one channel holding 1, 2, 3, 6 (mean 3, biased variance
// 3.5, unbiased 14/3), momentum 0.9 from running (0, 1).
TEST(BatchNormOpTest, RunningVarianceTakesTheUnbiasedBatchVariance) {
  std::map<std::string, Tensor> in = {{"x", test::FloatTensor({4, 1}, {1, 2, 3, 6})},
                                      {"scale", test::FloatTensor({1}, {1})},
                                      {"bias", test::FloatTensor({1}, {0})},
                                      {"mean", test::FloatTensor({1}, {0})},
                                      {"var", test::FloatTensor({1}, {1})}};
  BnOptions o;
  o.epsilon = 0.0f;
  auto scope = RunOp(BatchNormOp(o), in);
  EXPECT_NEAR(ValueAt(scope->GetVar("mean")->Get(), 0), 0.1 * 3, 1e-6);
  EXPECT_NEAR(ValueAt(scope->GetVar("var")->Get(), 0), 0.9 + 0.1 * 14.0 / 3.0, 1e-6);
  EXPECT_NEAR(ValueAt(scope->GetVar("y")->Get(), 3), 3 / std::sqrt(3.5), 1e-6);
  EXPECT_NEAR(ValueAt(scope->GetVar("saved_var")->Get(), 0), 1 / std::sqrt(3.5), 1e-6);
}

// Three training runs over one scope: the running statistics are updated in
// place each time, following the recurrence.
TEST(BatchNormOpTest, RunningStatisticsAccumulateInPlace) {
  std::mt19937 rng(2);
  auto in = BnInputs({6, 3, 2, 2}, DataType::kFP64, rng);
  proto::ProgramDesc program;
  proto::BlockDesc* block = program.add_blocks();
  block->set_idx(0);
  block->set_parent_idx(-1);
  *block->add_ops() = BatchNormOp();
  Scope scope;
  for (const auto& [name, t] : in) scope.Var(name)->GetMutable()->CopyFrom(t);
  Executor exec({false, false, false});
  std::map<std::string, Tensor> running = in;
  for (int step = 0; step < 3; ++step) {
    const Expected want = NaiveBatchNorm(running, BnOptions{});
    exec.RunProgram(program, scope);
    EXPECT_EQ(CompareTensors(scope.GetVar("mean")->Get(), want.mean_out, 1e-12, 1e-12), "") << step;
    EXPECT_EQ(CompareTensors(scope.GetVar("var")->Get(), want.var_out, 1e-12, 1e-12), "") << step;
    running["mean"].CopyFrom(scope.GetVar("mean")->Get());
    running["var"].CopyFrom(scope.GetVar("var")->Get());
  }
}

TEST(BatchNormOpTest, SeparateMeanOutLeavesMeanAlone) {
  std::mt19937 rng(3);
  const auto in = BnInputs({4, 3}, DataType::kFP64, rng);
  BnOptions o;
  o.in_place = false;
  auto scope = RunOp(BatchNormOp(o), in);
  const Expected want = NaiveBatchNorm(in, o);
  EXPECT_EQ(CompareTensors(scope->GetVar("mean")->Get(), in.at("mean"), 0, 0), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("mean_out")->Get(), want.mean_out, 1e-12, 1e-12), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("var_out")->Get(), want.var_out, 1e-12, 1e-12), "");
}

TEST(BatchNormOpTest, IsTestPassesRunningStatisticsToSeparateOutputs) {
  std::mt19937 rng(15);
  const auto in = BnInputs({3, 2, 4}, DataType::kFP32, rng);
  BnOptions o;
  o.is_test = true;
  o.in_place = false;
  for (bool onednn : {false, true}) {
    auto scope = RunOp(BatchNormOp(o), in, onednn);
    EXPECT_EQ(CompareTensors(scope->GetVar("mean_out")->Get(), in.at("mean"), 0, 0), "") << onednn;
    EXPECT_EQ(CompareTensors(scope->GetVar("var_out")->Get(), in.at("var"), 0, 0), "") << onednn;
  }
}

TEST(BatchNormOpTest, IsTestLeavesRunningStatisticsAndMayOmitOutputs) {
  std::mt19937 rng(4);
  const auto in = BnInputs({3, 4, 5}, DataType::kFP32, rng);
  const proto::OpDesc op = OpBuilder("batch_norm")
                               .In("X", {"x"})
                               .In("Scale", {"scale"})
                               .In("Bias", {"bias"})
                               .In("Mean", {"mean"})
                               .In("Variance", {"var"})
                               .Out("Y", {"y"})
                               .Attr("is_test", true)
                               .Build();
  auto scope = RunOp(op, in);
  BnOptions o;
  o.is_test = true;
  EXPECT_EQ(CompareTensors(scope->GetVar("y")->Get(), NaiveBatchNorm(in, o).y, 2e-6, 2e-6), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("mean")->Get(), in.at("mean"), 0, 0), "");
  EXPECT_EQ(CompareTensors(scope->GetVar("var")->Get(), in.at("var"), 0, 0), "");
}

// ---- gradients ----------------------------------------------------------------------------

TEST(BatchNormGradTest, TrainingGradMatchesFiniteDifferences) {
  std::mt19937 rng(5);
  for (const Dims& dims : OddShapes()) {
    SCOPED_TRACE(DimsToString(dims));
    EXPECT_EQ(CheckGrad(BatchNormOp(), BnInputs(dims, DataType::kFP64, rng), {"x", "scale", "bias"}, {"y"}), "");
  }
}

TEST(BatchNormGradTest, IsTestGradTreatsRunningStatisticsAsConstants) {
  std::mt19937 rng(6);
  BnOptions o;
  o.is_test = true;
  for (const Dims& dims : OddShapes()) {
    SCOPED_TRACE(DimsToString(dims));
    EXPECT_EQ(CheckGrad(BatchNormOp(o), BnInputs(dims, DataType::kFP64, rng), {"x", "scale", "bias"}, {"y"}), "");
  }
}

TEST(BatchNormGradTest, RecomputesStatisticsWithoutSavedOutputs) {
  std::mt19937 rng(7);
  for (bool is_test : {false, true}) {
    BnOptions o;
    o.is_test = is_test;
    o.saved = false;
    EXPECT_EQ(CheckGrad(BatchNormOp(o), BnInputs({5, 3, 2, 3}, DataType::kFP64, rng), {"x", "scale", "bias"}, {"y"}),
              "")
        << (is_test ? "is_test" : "training");
  }
}

TEST(BatchNormGradTest, GradMakerAndRegistry) {
  const OpInfo& info = OpRegistry::Global().Get("batch_norm");
  const std::vector<proto::OpDesc> grads = info.grad_maker(BatchNormOp());
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0].type(), "batch_norm_grad");
  EXPECT_EQ(InputArgs(grads[0], "SavedMean"), std::vector<std::string>{"saved_mean"});
  EXPECT_EQ(InputArgs(grads[0], "SavedVariance"), std::vector<std::string>{"saved_var"});
  EXPECT_EQ(OutputArgs(grads[0], "X@GRAD"), std::vector<std::string>{"x@GRAD"});
  EXPECT_TRUE(OutputArgs(grads[0], "Mean@GRAD").empty());
  EXPECT_EQ(info.no_grad_inputs, (std::vector<std::string>{"Mean", "Variance"}));
  const std::vector<std::pair<std::string, std::string>> inplace = {{"Mean", "MeanOut"}, {"Variance", "VarianceOut"}};
  EXPECT_EQ(info.inplace, inplace);
  EXPECT_EQ(info.jit, JitLowering::kOneDnn);
  EXPECT_EQ(OpRegistry::Global().Get("batch_norm_grad").jit, JitLowering::kOneDnn);
}

// Only Scale@GRAD wanted, and no Y@GRAD at all (zeros).
TEST(BatchNormGradTest, PartialOutputsAndAbsentOutGrad) {
  std::mt19937 rng(8);
  auto in = BnInputs({4, 3, 5}, DataType::kFP64, rng);
  auto fwd = RunOp(BatchNormOp(), in);
  std::map<std::string, Tensor> g = {{"x", in["x"]}, {"scale", in["scale"]}};
  g["saved_mean"].CopyFrom(fwd->GetVar("saved_mean")->Get());
  g["saved_var"].CopyFrom(fwd->GetVar("saved_var")->Get());
  g["dy"] = RandomTensor({4, 3, 5}, DataType::kFP64, rng);
  auto grad_op = [](bool with_dy, bool all) {
    OpBuilder b("batch_norm_grad");
    b.In("X", {"x"}).In("Scale", {"scale"}).In("SavedMean", {"saved_mean"}).In("SavedVariance", {"saved_var"});
    if (with_dy) b.In("Y@GRAD", {"dy"});
    b.Out("Scale@GRAD", {"dscale"});
    if (all) b.Out("X@GRAD", {"dx"}).Out("Bias@GRAD", {"dbias"});
    return b.Build();
  };
  auto all = RunOp(grad_op(true, true), g);
  auto one = RunOp(grad_op(true, false), g);
  EXPECT_EQ(CompareTensors(one->GetVar("dscale")->Get(), all->GetVar("dscale")->Get(), 0, 0), "");
  EXPECT_EQ(one->FindVar("dx"), nullptr);
  auto zeros = RunOp(grad_op(false, true), g);
  for (const char* name : {"dx", "dscale", "dbias"}) {
    const Tensor& t = zeros->GetVar(name)->Get();
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(ValueAt(t, i), 0.0) << name;
  }
}

// ---- oneDNN ---------------------------------------------------------------------------------

// Runs `op` on the reference and on oneDNN with `onednn`; every output agrees
// and the oneDNN kernel did the work.
void ExpectOneDnnParity(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs,
                        const onednn::Settings& onednn, double tol = 2e-5) {
  const int64_t before = OneDnnKernelRuns(op.type());
  auto ref = RunOp(op, inputs, /*use_onednn=*/false);
  auto dnn = RunOp(op, inputs, /*use_onednn=*/true, onednn);
  EXPECT_EQ(OneDnnKernelRuns(op.type()), before + 1) << "the oneDNN kernel of " << op.type() << " fell back";
  for (const std::string& arg : AllOutputArgs(op)) {
    if (arg == kEmptyVarName) continue;
    EXPECT_EQ(CompareTensors(dnn->GetVar(arg)->Get(), ref->GetVar(arg)->Get(), tol, tol), "") << arg;
  }
}

// BatchNormOneDnnTest checks parity on whatever implementation oneDNN picks
// (AllowSlowOneDnn); BatchNormOneDnnDefaultTest under the default settings.
TEST(BatchNormOneDnnTest, ForwardMatchesReference) {
  std::mt19937 rng(9);
  for (const Dims& dims : OddShapes()) {
    for (bool is_test : {false, true}) {
      SCOPED_TRACE(DimsToString(dims) + (is_test ? " is_test" : " training"));
      BnOptions o;
      o.is_test = is_test;
      ExpectOneDnnParity(BatchNormOp(o), BnInputs(dims, DataType::kFP32, rng), AllowSlowOneDnn());
    }
  }
}

// The grad op fed with the reference forward's saved statistics and a random
// Y@GRAD; every gradient, or only some.
TEST(BatchNormOneDnnTest, GradMatchesReference) {
  std::mt19937 rng(10);
  for (const Dims& dims : OddShapes()) {
    for (bool is_test : {false, true}) {
      for (bool all : {true, false}) {
        SCOPED_TRACE(DimsToString(dims) + (is_test ? " is_test" : " training") + (all ? "" : " X@GRAD only"));
        BnOptions o;
        o.is_test = is_test;
        auto in = BnInputs(dims, DataType::kFP32, rng);
        auto fwd = RunOp(BatchNormOp(o), in);
        proto::OpDesc g = OpRegistry::Global().Get("batch_norm").grad_maker(BatchNormOp(o))[0];
        if (!all) {
          SetOutput(&g, "Scale@GRAD", {kEmptyVarName});
          SetOutput(&g, "Bias@GRAD", {kEmptyVarName});
        }
        std::map<std::string, Tensor> feed;
        for (const char* name : {"x", "scale", "mean", "var", "saved_mean", "saved_var"}) {
          feed[name].CopyFrom(fwd->GetVar(name)->Get());
        }
        feed["y@GRAD"] = RandomTensor(dims, DataType::kFP32, rng);
        ExpectOneDnnParity(g, feed, AllowSlowOneDnn(), 5e-5);
      }
    }
  }
}

TEST(BatchNormOneDnnTest, Fp64FallsBackToTheReference) {
  std::mt19937 rng(11);
  const int64_t before = OneDnnKernelRuns("batch_norm");
  RunOp(BatchNormOp(), BnInputs({4, 3}, DataType::kFP64, rng), /*use_onednn=*/true, AllowSlowOneDnn());
  EXPECT_EQ(OneDnnKernelRuns("batch_norm"), before);
}

TEST(BatchNormOneDnnDefaultTest, CommonShapesRunOnAFastImplementation) {
  std::mt19937 rng(12);
  for (const Dims& dims : {Dims{32, 16, 8, 8}, Dims{64, 120}}) {
    SCOPED_TRACE(DimsToString(dims));
    ExpectOneDnnParity(BatchNormOp(), BnInputs(dims, DataType::kFP32, rng), onednn::Settings{});
  }
}

// ---- errors ------------------------------------------------------------------------------------

TEST(BatchNormErrorTest, BadInputsAndAttributes) {
  std::mt19937 rng(13);
  auto run = [](const proto::OpDesc& op, const std::map<std::string, Tensor>& in) {
    return ErrorOf([&] { RunOp(op, in); });
  };
  auto in = BnInputs({4, 3, 2}, DataType::kFP32, rng);
  auto with = [&](const std::string& name, const Tensor& t) {
    auto copy = in;
    copy[name] = t;
    return copy;
  };
  EXPECT_NE(run(BatchNormOp(), with("x", RandomTensor({12}, DataType::kFP32, rng))).find("expected rank 2 to 5"),
            std::string::npos);
  EXPECT_NE(run(BatchNormOp(), with("x", RandomTensor({2, 3, 1, 1, 1, 2}, DataType::kFP32, rng)))
                .find("expected rank 2 to 5"),
            std::string::npos);
  EXPECT_NE(run(BatchNormOp(), with("scale", RandomTensor({4}, DataType::kFP32, rng)))
                .find("input Scale: expected dims [3] (the channels of X [4,3,2]), got [4]"),
            std::string::npos);
  EXPECT_NE(run(BatchNormOp(), with("var", RandomTensor({3}, DataType::kFP64, rng)))
                .find("input Variance: expected dtype f32 (as X), got f64"),
            std::string::npos);
  EXPECT_NE(run(BatchNormOp(), with("x", test::Int64Tensor({2, 3}, {1, 2, 3, 4, 5, 6})))
                .find("input X: expected dtype f32 or f64, got i64"),
            std::string::npos);
  BnOptions o;
  o.momentum = 1.5f;
  EXPECT_NE(run(BatchNormOp(o), in).find("attribute momentum: expected a value in [0, 1], got 1.5"), std::string::npos);
  o = {};
  o.epsilon = -1e-3f;
  EXPECT_NE(run(BatchNormOp(o), in).find("attribute epsilon"), std::string::npos);
  EXPECT_NE(run(BatchNormOp(), with("x", RandomTensor({1, 3, 1, 1}, DataType::kFP32, rng)))
                .find("training needs more than one value per channel (N * spatial = 1)"),
            std::string::npos);
  o = {};
  o.is_test = true;
  EXPECT_EQ(run(BatchNormOp(o), with("x", RandomTensor({1, 3, 1, 1}, DataType::kFP32, rng))), "(no error)");
  const proto::OpDesc no_mean_out = OpBuilder("batch_norm")
                                        .In("X", {"x"})
                                        .In("Scale", {"scale"})
                                        .In("Bias", {"bias"})
                                        .In("Mean", {"mean"})
                                        .In("Variance", {"var"})
                                        .Out("Y", {"y"})
                                        .Build();
  EXPECT_NE(run(no_mean_out, in).find("output MeanOut is required in training (is_test = false)"), std::string::npos);
}

TEST(BatchNormErrorTest, GradNeedsStatisticsInIsTest) {
  std::mt19937 rng(14);
  auto in = BnInputs({4, 3}, DataType::kFP32, rng);
  in["dy"] = RandomTensor({4, 3}, DataType::kFP32, rng);
  const proto::OpDesc g = OpBuilder("batch_norm_grad")
                              .In("X", {"x"})
                              .In("Scale", {"scale"})
                              .In("Y@GRAD", {"dy"})
                              .Out("X@GRAD", {"dx"})
                              .Attr("is_test", true)
                              .Build();
  EXPECT_NE(ErrorOf([&] { RunOp(g, in); }).find("is_test: inputs Mean and Variance"), std::string::npos);
  in["dy"] = RandomTensor({4, 2}, DataType::kFP32, rng);
  proto::OpDesc g2 = g;
  SetAttr(&g2, "is_test", Attribute(false));
  EXPECT_NE(ErrorOf([&] { RunOp(g2, in); }).find("input Y@GRAD: expected dims [4,3] (as X), got [4,2]"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
