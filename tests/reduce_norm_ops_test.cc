// reduce_prod, reduce_l1, reduce_l2, logsumexp: values over dims, all,
// keep_dim, empty groups (the identities), integers, logsumexp's stability
// and infinities, grads by finite differences, reduce_prod's grad at zeros,
// registry entries, errors, and the JIT: reduce_l1 and the pointwise grads
// in generated kernels against the reference kernels on both ISAs, the
// others' framework kernels inside a cluster.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"
#include "tests/unary_op_test_util.h"

namespace kiln {
namespace {

using test::CheckGrad;
using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::RunAndGet;
using test::ValuesOf;

constexpr double kInf = std::numeric_limits<double>::infinity();

proto::OpDesc Reduce(const std::string& type, const std::vector<int64_t>& dim, bool keep_dim = false,
                     bool reduce_all = false) {
  return OpBuilder(type)
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("dim", dim)
      .Attr("keep_dim", keep_dim)
      .Attr("reduce_all", reduce_all)
      .Build();
}

Tensor RunReduce(const std::string& type, const Tensor& x, const std::vector<int64_t>& dim, bool keep_dim = false,
           bool reduce_all = false) {
  return RunAndGet(Reduce(type, dim, keep_dim, reduce_all), {{"x", x}}, "out");
}

TEST(ReduceNormOpsTest, ValuesOverDimsAndAll) {
  const Tensor x = FloatTensor({2, 3}, {1, -2, 3, -4, 5, 0.5f});
  EXPECT_EQ(CompareTensors(RunReduce("reduce_prod", x, {1}), FloatTensor({2}, {-6, -10}), 0, 0), "");
  EXPECT_EQ(CompareTensors(RunReduce("reduce_prod", x, {0}, true), FloatTensor({1, 3}, {-4, -10, 1.5f}), 0, 0), "");
  EXPECT_EQ(CompareTensors(RunReduce("reduce_l1", x, {-1}), FloatTensor({2}, {6, 9.5f}), 0, 0), "");
  EXPECT_EQ(CompareTensors(RunReduce("reduce_l1", x, {}, false, true), FloatTensor({1}, {15.5f}), 0, 0), "");
  EXPECT_EQ(CompareTensors(RunReduce("reduce_l2", x, {1}), FloatTensor({2}, {std::sqrt(14.0f), std::sqrt(41.25f)}), 0, 1e-7),
            "");
  const double l0 = std::log(std::exp(1.0) + std::exp(-2.0) + std::exp(3.0));
  const double l1 = std::log(std::exp(-4.0) + std::exp(5.0) + std::exp(0.5));
  EXPECT_EQ(CompareTensors(RunReduce("logsumexp", x, {1}, true), FloatTensor({2, 1}, {float(l0), float(l1)}), 0, 1e-7), "");
  // Integers: products and sums of magnitudes, exact.
  const Tensor i = test::Int64Tensor({2, 2}, {-3, 4, 5, -6});
  EXPECT_EQ(ValuesOf<int64_t>(RunReduce("reduce_prod", i, {0})), (std::vector<int64_t>{-15, -24}));
  EXPECT_EQ(ValuesOf<int32_t>(RunReduce("reduce_l1", test::TypedTensor<int32_t>({3}, {-3, 4, -5}), {0})),
            (std::vector<int32_t>{12}));
}

// Reducing an empty dim gives each reduction's identity (ONNX's empty-set tests).
TEST(ReduceNormOpsTest, EmptyGroupsGiveIdentities) {
  const Tensor x = FloatTensor({2, 0, 4}, {});
  const std::vector<std::pair<std::string, float>> want = {
      {"reduce_prod", 1}, {"reduce_l1", 0}, {"reduce_l2", 0}, {"logsumexp", -INFINITY}};
  for (const auto& [type, v] : want) {
    const Tensor got = RunReduce(type, x, {1}, true);
    EXPECT_EQ(got.dims(), (Dims{2, 1, 4})) << type;
    EXPECT_EQ(CompareTensors(got, FloatTensor({2, 1, 4}, std::vector<float>(8, v)), 0, 0), "") << type;
  }
}

TEST(ReduceNormOpsTest, LogSumExpIsStableAndKeepsInfinities) {
  const float inf = INFINITY;
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const Tensor x =
        test::CastTo(FloatTensor({5, 3}, {1000, 1000, -1000, -inf, -inf, -inf, 1, inf, 2, 1, NAN, 2, NAN, inf, 0}), dtype);
    EXPECT_EQ(CompareTensors(RunReduce("logsumexp", x, {1}),
                             test::ValuesTensor({1000 + std::log(2.0), -kInf, kInf, NAN, NAN}, dtype), 0, 1e-7),
              "")
        << DataTypeName(dtype);
  }
}

TEST(ReduceNormOpsTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(13);
  for (const std::string type : {"reduce_prod", "reduce_l1", "reduce_l2", "logsumexp"}) {
    for (const auto& [dim, keep] : std::vector<std::pair<std::vector<int64_t>, bool>>{
             {{1}, false}, {{0}, true}, {{0, 2}, false}, {{}, false}}) {
      Tensor x = test::RandomTensor({3, 4, 2}, DataType::kFP64, rng, 0.3, 1.5);
      // Signs for l1 and prod, away from 0.
      for (int64_t i = 0; i < x.numel(); i += 3) x.mutable_data<double>()[i] *= -1;
      EXPECT_EQ(CheckGrad(Reduce(type, dim, keep), {{"x", x}}, {"x"}, {"out"}), "")
          << type << DimsToString(dim) << keep;
    }
  }
}

// The product of the others, exactly, where Out / X would divide by zero.
TEST(ReduceNormOpsTest, ProdGradAtZeros) {
  const proto::OpDesc fwd = Reduce("reduce_prod", {1});
  const proto::OpDesc g = OpRegistry::Global().Get("reduce_prod").grad_maker(fwd)[0];
  const Tensor x = FloatTensor({3, 3}, {2, 0, 3, 0, 0, 5, 2, 4, 0.5f});
  auto scope = test::RunOp(g, {{"x", x}, {"out@GRAD", FloatTensor({3}, {1, 1, 2})}});
  EXPECT_EQ(CompareTensors(scope->GetVar("x@GRAD")->Get(), FloatTensor({3, 3}, {0, 6, 0, 0, 0, 0, 4, 2, 16}), 0, 0),
            "");
}

TEST(ReduceNormOpsTest, RegistryEntries) {
  const auto& reg = OpRegistry::Global();
  EXPECT_EQ(reg.Get("reduce_prod").jit, JitLowering::kFramework);
  EXPECT_EQ(reg.Get("reduce_prod_grad").jit, JitLowering::kFramework);
  EXPECT_EQ(reg.Get("reduce_l1").jit, JitLowering::kReduction);
  EXPECT_EQ(reg.Get("reduce_l1_grad").jit, JitLowering::kReduction);
  EXPECT_EQ(reg.Get("reduce_l2").jit, JitLowering::kFramework);
  EXPECT_EQ(reg.Get("reduce_l2_grad").jit, JitLowering::kReduction);
  EXPECT_EQ(reg.Get("logsumexp").jit, JitLowering::kFramework);
  EXPECT_EQ(reg.Get("logsumexp_grad").jit, JitLowering::kReduction);
  for (const std::string type : {"reduce_l2", "logsumexp"}) {
    EXPECT_EQ(InputArgs(reg.Get(type).grad_maker(Reduce(type, {0}))[0], "Out").size(), 1u) << type;
  }
}

TEST(ReduceNormOpsTest, ErrorsNameTheOpAndTheProblem) {
  std::string e = ErrorOf([] { test::RunOp(Reduce("reduce_l2", {0}), {{"x", test::Int64Tensor({2}, {1, 2})}}); });
  EXPECT_NE(e.find("reduce_l2"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(Reduce("reduce_prod", {0}), {{"x", test::TypedTensor<bool>({1}, {true})}}); });
  EXPECT_NE(e.find("input X: expected dtype f32, f64, i64 or i32, got bool"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(Reduce("logsumexp", {2}), {{"x", FloatTensor({2, 2}, {1, 2, 3, 4})}}); });
  EXPECT_NE(e.find("logsumexp"), std::string::npos) << e;
  EXPECT_NE(e.find("attribute dim"), std::string::npos) << e;
  e = ErrorOf([] {
    const proto::OpDesc g = OpRegistry::Global().Get("reduce_l2").grad_maker(Reduce("reduce_l2", {1}))[0];
    test::RunOp(g, {{"x", FloatTensor({2, 2}, {1, 2, 3, 4})},
                    {"out", FloatTensor({2}, {1, 2})},
                    {"out@GRAD", FloatTensor({3}, {1, 2, 3})}});
  });
  EXPECT_NE(e.find("reduce_l2_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("input Out@GRAD: expected dims [2] (as Out), got [3]"), std::string::npos) << e;
}

// ---- the JIT ------------------------------------------------------------------------

// reduce_l1 (forward and grad) and the grads of reduce_l2 and logsumexp,
// each one generated kernel, against the reference.
TEST(ReduceNormOpsJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  struct Case {
    Dims x;
    std::vector<int64_t> dim;
    bool keep;
  };
  const std::vector<Case> cases = {{{17}, {0}, false}, {{5, 33}, {1}, true}, {{4, 3, 9}, {0, 2}, false},
                                   {{3, 4099}, {0}, false}, {{16, 1}, {}, false}};
  std::mt19937 rng(14);
  for (Isa isa : test::TestedIsas()) {
    for (const Case& k : cases) {
      for (const std::string kernel : {"reduce_l1", "reduce_l1_grad", "reduce_l2_grad", "logsumexp_grad"}) {
        SCOPED_TRACE(kernel + " " + DimsToString(k.x) + DimsToString(k.dim) + " " + IsaName(isa));
        const bool grad = kernel.size() > 5 && kernel.substr(kernel.size() - 5) == "_grad";
        const std::string type = grad ? kernel.substr(0, kernel.size() - 5) : kernel;
        const proto::OpDesc fwd = Reduce(type, k.dim, k.keep);
        test::LoweringCase c;
        c.name = kernel;
        c.options.isa = isa;
        c.given["x"] = test::RandomTensor(k.x, DataType::kFP32, rng, -2, 2);
        const Tensor out = RunAndGet(fwd, {{"x", c.given["x"]}}, "out");
        if (!grad) {
          c.ops = {fwd};
          c.inputs = {{"x", k.x}};
          c.outputs = {"out"};
        } else {
          c.ops = {OpRegistry::Global().Get(type).grad_maker(fwd)[0]};
          c.inputs = {{"x", k.x}};
          if (!InputArgs(c.ops[0], "Out").empty()) {
            c.inputs.push_back({"out", out.dims()});
            c.given["out"] = out;
          }
          c.inputs.push_back({"out@GRAD", out.dims()});
          c.outputs = {"x@GRAD"};
        }
        // A generated sum runs in f32 over up to 4099 terms; the reference sums in double.
        const auto obj = test::CheckLoweringNumerics(c, grad ? 1e-6 : 1e-4, grad ? 2e-5 : 1e-5);
        ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
        EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
      }
    }
  }
}

TEST(ReduceNormOpsJitTest, FrameworkReductionsRunInsideACluster) {
  for (const std::string type : {"reduce_prod", "reduce_l2", "logsumexp"}) {
    test::LoweringCase c;
    c.name = type;
    const proto::OpDesc fwd = Reduce(type, {1}, true);
    c.ops = {fwd, OpRegistry::Global().Get(type).grad_maker(fwd)[0]};
    c.inputs = {{"x", {6, 9}}, {"out@GRAD", {6, 1}}};
    c.outputs = {"out", "x@GRAD"};
    const auto obj = test::CheckLoweringNumerics(c, 1e-6, 2e-5);
    EXPECT_EQ(obj->program.instructions[0].kernel->name(), type) << obj->Listing();
  }
}

}  // namespace
}  // namespace kiln
