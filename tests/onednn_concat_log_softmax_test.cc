// oneDNN kernels of concat, split_grad, log_softmax and log_softmax_grad
// against their reference kernels on odd shapes. Each case checks that the
// oneDNN kernel did the work (its run counter moved) or, for the cases it
// must leave to the reference kernel (FP64, an absent out-grad, an empty
// input, a shared buffer), that it did not.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "framework/onednn/handlers_concat_log_softmax.h"
#include "framework/onednn/onednn_handler.h"
#include "framework/onednn/onednn_kernels.h"
#include "framework/op_registry.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::RandomTensor;

enum class Expect { kOneDnn, kFallback };

// oneDNN 2.6 has its jit log-softmax backward for AVX-512 (avx512_core)
// only; other CPUs get its generic one, which the kernels refuse by default.
Expect LogSoftmaxBackwardByDefault() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? Expect::kOneDnn
                                                                                 : Expect::kFallback;
}

std::mt19937& Rng() {
  static std::mt19937 rng(77);
  return rng;
}
Tensor Rand(const Dims& dims, DataType dtype = DataType::kFP32) { return RandomTensor(dims, dtype, Rng(), -3, 3); }

// Runs `op` on the reference kernels and with oneDNN; every output must agree
// and the oneDNN kernel of op.type() must have run (or not).
// `onednn`: the settings of the oneDNN run.
void ExpectParity(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs, Expect expect,
                  double tol = 1e-5, const onednn::Settings& onednn = {}) {
  SCOPED_TRACE(op.DebugString());
  const int64_t before = OneDnnKernelRuns(op.type());
  auto ref = test::RunOp(op, inputs, /*use_onednn=*/false);
  auto dnn = test::RunOp(op, inputs, /*use_onednn=*/true, onednn);
  EXPECT_EQ(OneDnnKernelRuns(op.type()), before + (expect == Expect::kOneDnn ? 1 : 0))
      << (expect == Expect::kOneDnn ? "fell back to the reference" : "ran where it should fall back");
  int compared = 0;
  for (const auto& slot : op.outputs()) {
    for (const auto& arg : slot.args()) {
      if (arg == kEmptyVarName) continue;
      EXPECT_EQ(test::CompareTensors(dnn->GetVar(arg)->Get(), ref->GetVar(arg)->Get(), tol, tol), "") << arg;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

std::vector<std::string> Names(const std::string& prefix, size_t n) {
  std::vector<std::string> out;
  for (size_t k = 0; k < n; ++k) out.push_back(prefix + std::to_string(k));
  return out;
}

proto::OpDesc ConcatOp(size_t n, int64_t axis, const std::string& out = "y") {
  return OpBuilder("concat").In("X", Names("x", n)).Out("Out", {out}).Attr("axis", axis).Build();
}

std::map<std::string, Tensor> Inputs(const std::vector<Dims>& dims, DataType dtype = DataType::kFP32) {
  std::map<std::string, Tensor> in;
  for (size_t k = 0; k < dims.size(); ++k) in["x" + std::to_string(k)] = Rand(dims[k], dtype);
  return in;
}

TEST(OneDnnConcatTest, MatchesReference) {
  const std::vector<std::pair<std::vector<Dims>, int64_t>> cases = {{{{7, 17}, {7, 1}, {7, 33}}, 1},
                                                                    {{{1, 5}, {3, 5}}, 0},
                                                                    {{{2, 3, 4, 5}, {2, 3, 1, 5}}, 2},
                                                                    {{{2, 3, 5}, {2, 3, 7}}, -1},
                                                                    {{{17}, {1}, {16}, {33}}, 0},
                                                                    {{{4, 9}}, 1},
                                                                    {{{2, 3, 5, 5}, {2, 8, 5, 5}, {2, 1, 5, 5}}, 1}};
  for (const auto& [dims, axis] : cases) ExpectParity(ConcatOp(dims.size(), axis), Inputs(dims), Expect::kOneDnn);
}

TEST(OneDnnConcatTest, FallsBackWhereItCannotRun) {
  ExpectParity(ConcatOp(2, 0), Inputs({{2, 3}, {1, 3}}, DataType::kFP64), Expect::kFallback);
  ExpectParity(ConcatOp(2, 1), Inputs({{2, 3}, {2, 0}}), Expect::kFallback);  // an empty input
  // A concat of a var with itself reads one buffer twice: fine for oneDNN.
  ExpectParity(OpBuilder("concat").In("X", {"x0", "x0"}).Out("Out", {"y"}).Attr("axis", int64_t{0}).Build(),
               Inputs({{3, 5}}), Expect::kOneDnn);
}

// The primitive cache key is typed: the sources' dims and the axis.
TEST(OneDnnConcatTest, KeyHoldsSourceDimsAndAxis) {
  onednn::PrimitiveCache cache;
  onednn::ConcatHandler a(cache, onednn::Settings{}, {{2, 3}, {2, 5}}, 1);
  ASSERT_TRUE(a.valid());
  EXPECT_EQ(a.dst_dims(), (Dims{2, 8}));
  EXPECT_EQ(a.forward_key().ToString(), "concat f32 [2,3]x[2,5] axis=1");
  onednn::ConcatHandler b(cache, onednn::Settings{}, {{2, 3}, {2, 5}}, 0);
  EXPECT_FALSE(b.valid());  // dims differ off the axis
  onednn::ConcatHandler c(cache, onednn::Settings{}, {{3, 5}, {2, 5}}, 0);
  EXPECT_NE(a.forward_key(), c.forward_key());
}

TEST(OneDnnConcatTest, SplitGradIsAConcatOfTheOutGrads) {
  const auto split_grad = [](const std::vector<std::string>& douts, int64_t axis, int64_t num,
                             const std::vector<int64_t>& sections) {
    return OpBuilder("split_grad")
        .In("X", {"x"})
        .In("Out@GRAD", douts)
        .Out("X@GRAD", {"dx"})
        .Attr("axis", axis)
        .Attr("num", num)
        .Attr("sections", sections)
        .Build();
  };
  ExpectParity(split_grad({"g0", "g1", "g2"}, 1, 0, {2, -1, 5}),
               {{"x", Rand({7, 17})}, {"g0", Rand({7, 2})}, {"g1", Rand({7, 10})}, {"g2", Rand({7, 5})}},
               Expect::kOneDnn);
  ExpectParity(split_grad({"g0", "g1"}, 0, 2, {}),
               {{"x", Rand({6, 3, 5})}, {"g0", Rand({3, 3, 5})}, {"g1", Rand({3, 3, 5})}}, Expect::kOneDnn);
  // An absent out-grad means zeros there: the reference kernel does it.
  ExpectParity(split_grad({"g0", kEmptyVarName}, 0, 2, {}), {{"x", Rand({6, 3})}, {"g0", Rand({3, 3})}},
               Expect::kFallback);
}

proto::OpDesc LogSoftmaxOp(int64_t axis) {
  return OpBuilder("log_softmax").In("X", {"x"}).Out("Out", {"y"}).Attr("axis", axis).Build();
}
proto::OpDesc LogSoftmaxGradOp(int64_t axis) {
  return OpBuilder("log_softmax_grad")
      .In("Out", {"y"})
      .In("Out@GRAD", {"dy"})
      .Out("X@GRAD", {"dx"})
      .Attr("axis", axis)
      .Build();
}

// Out of the reference forward (so the grad sees a real log-softmax).
Tensor LogSoftmaxOf(const Tensor& x, int64_t axis) { return test::RunAndGet(LogSoftmaxOp(axis), {{"x", x}}, "y"); }

TEST(OneDnnLogSoftmaxTest, MatchesReferenceOnTheInnermostAxis) {
  for (const Dims& dims : {Dims{1, 1}, Dims{7, 17}, Dims{33}, Dims{2, 3, 65}, Dims{5, 1000}}) {
    const Tensor x = Rand(dims);
    ExpectParity(LogSoftmaxOp(-1), {{"x", x}}, Expect::kOneDnn);
    ExpectParity(LogSoftmaxGradOp(-1), {{"y", LogSoftmaxOf(x, -1)}, {"dy", Rand(dims)}},
                 LogSoftmaxBackwardByDefault());
  }
  // Large logits: oneDNN subtracts the max too.
  ExpectParity(LogSoftmaxOp(-1), {{"x", test::FloatTensor({2, 2}, {-1000, 0, 1000, 1001})}}, Expect::kOneDnn);
}

// oneDNN has only its generic implementation off the innermost axis; the
// kernels refuse it by default (OneDnnHandler) and take it when allowed.
TEST(OneDnnLogSoftmaxTest, OtherAxes) {
  const Tensor x = Rand({2, 33, 5});
  ExpectParity(LogSoftmaxOp(1), {{"x", x}}, Expect::kFallback);
  ExpectParity(LogSoftmaxOp(1), {{"x", x}}, Expect::kOneDnn, 1e-5, test::AllowSlowOneDnn());
  ExpectParity(LogSoftmaxGradOp(1), {{"y", LogSoftmaxOf(x, 1)}, {"dy", Rand({2, 33, 5})}}, Expect::kOneDnn, 1e-5,
               test::AllowSlowOneDnn());
}

TEST(OneDnnLogSoftmaxTest, FallsBackForFp64AndAbsentOutGrad) {
  ExpectParity(LogSoftmaxOp(-1), {{"x", Rand({3, 7}, DataType::kFP64)}}, Expect::kFallback);
  const proto::OpDesc no_dy =
      OpBuilder("log_softmax_grad").In("Out", {"y"}).In("Out@GRAD", {kEmptyVarName}).Out("X@GRAD", {"dx"}).Build();
  ExpectParity(no_dy, {{"y", LogSoftmaxOf(Rand({3, 7}), -1)}}, Expect::kFallback);
}

TEST(OneDnnConcatLogSoftmaxTest, KernelsAreListed) {
  const std::vector<std::string> all = OneDnnKernelOps();
  for (const char* type : {"concat", "split_grad", "log_softmax", "log_softmax_grad"}) {
    EXPECT_NE(std::find(all.begin(), all.end(), type), all.end()) << type;
    EXPECT_TRUE(static_cast<bool>(OpRegistry::Global().Get(type).onednn_kernel)) << type;
  }
}

}  // namespace
}  // namespace kiln
