// bf16_weight_copies (--amp bf16): a weight read by a layer's forward matmul
// and by its input gradient in one cluster is converted to bf16 once, and
// both products bind the copy. Golden traces for the step firing and not
// firing, the numbers against the f32 reference kernels within the bf16
// bound, and the copy against oneDNN's own conversion bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/kernels/onednn/onednn_kernels.h"
#include "framework/bf16.h"
#include "runtime/program.h"
#include "tests/bf16_util.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln::test {
namespace {

// y = x w + b, then its backward from dy: dx, b's gradient, and sgd on w
// (the weight gradient folds into the step). No activation: a relu's mask
// would take the bf16 forward's sign flips near 0 into the gradients, beyond
// any per-product bound.
LoweringCase LayerForwardAndBackward(const std::string& name, int64_t m, int64_t k, int64_t n, bool want_dx) {
  LoweringCase c;
  c.name = name;
  OpBuilder g("matmul_grad");
  g.In("X", {"x"}).In("Y", {"w"}).In("Out@GRAD", {"mm@GRAD"}).Out("Y@GRAD", {"w@GRAD"});
  g.Out("X@GRAD", {want_dx ? "x@GRAD" : kEmptyVarName});
  c.ops = {OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"mm"}).Build(),
           OpBuilder("elementwise_add").In("X", {"mm"}).In("Y", {"b"}).Out("Out", {"y"}).Build(),
           OpBuilder("elementwise_add_grad")
               .In("Y", {"b"})
               .In("Out@GRAD", {"dy"})
               .Out("X@GRAD", {"mm@GRAD"})
               .Out("Y@GRAD", {"b@GRAD"})
               .Build(),
           g.Build(),
           OpBuilder("sgd").In("Param", {"w"}).In("Grad", {"w@GRAD"}).In("LearningRate", {"lr"}).Out("ParamOut", {"w"}).Build()};
  c.inputs = {{"x", {m, k}}, {"w", {k, n}}, {"b", {n}}, {"dy", {m, n}}, {"lr", {1}}};
  c.outputs = {"y", "w", "b@GRAD"};
  if (want_dx) c.outputs.push_back("x@GRAD");
  c.options.amp_compute = ComputeType::kBF16;
  return c;
}


TEST(Bf16WeightCopiesTest, TheForwardAndTheInputGradientReadOneCopy) {
  KILN_SKIP_WITHOUT_BF16();
  const LoweringCase c = LayerForwardAndBackward("bf16_weight_copies", 37, 29, 19, true);
  CheckLoweringGolden(c);
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 19}, {5, 64, 33}, {130, 17, 96}}) {
    LoweringCase odd = LayerForwardAndBackward("bf16_weight_copies", m, k, n, true);
    // Each output's own contraction: y over k, dX over n, W's step over m
    // (times lr, up to 2); b's gradient is an f32 sum.
    odd.output_atol = {{"y", Bf16Atol(k)}, {"x@GRAD", Bf16Atol(n)}, {"w", 2 * Bf16Atol(m)}, {"b@GRAD", 1e-5 * m}};
    const auto obj = CheckLoweringNumerics(odd, 0, 0);
    EXPECT_TRUE(StepMatched(*obj, "bf16_weight_copies")) << obj->lowering;
    const std::string listing = obj->Listing();
    EXPECT_NE(listing.find("w to bf16 ("), std::string::npos) << listing;
    EXPECT_NE(listing.find("w@BF16 : bf16["), std::string::npos) << listing;
    int readers = 0;
    for (size_t at = listing.find("W a bf16 copy"); at != std::string::npos; at = listing.find("W a bf16 copy", at + 1)) {
      ++readers;
    }
    EXPECT_EQ(readers, 2) << listing;  // the forward product and dX
  }
}

TEST(Bf16WeightCopiesTest, DoesNotFireForOneReaderOrInF32) {
  KILN_SKIP_WITHOUT_BF16();
  // Without dX the forward matmul alone reads W: its own reorder is as cheap.
  CheckLoweringGolden(LayerForwardAndBackward("bf16_weight_copies_one_reader", 37, 29, 19, false));
  LoweringCase f32 = LayerForwardAndBackward("bf16_weight_copies_f32", 37, 29, 19, true);
  f32.options.amp_compute = ComputeType::kF32;
  const auto obj = CheckLoweringNumerics(f32, 1e-4, 1e-4);
  EXPECT_FALSE(StepMatched(*obj, "bf16_weight_copies")) << obj->lowering;
}

// Two forward matmuls of w with an sgd step of w between them: the second
// reads the new w, so no copy may serve both.
TEST(Bf16WeightCopiesTest, DoesNotFireAcrossAWriteOfTheWeight) {
  KILN_SKIP_WITHOUT_BF16();
  LoweringCase c;
  c.name = "bf16_weight_copies_written_between";
  c.ops = {OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"mm"}).Build(),
           OpBuilder("elementwise_add").In("X", {"mm"}).In("Y", {"b"}).Out("Out", {"y"}).Build(),
           OpBuilder("sgd").In("Param", {"w"}).In("Grad", {"g"}).In("LearningRate", {"lr"}).Out("ParamOut", {"w"}).Build(),
           OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"mm2"}).Build(),
           OpBuilder("elementwise_add").In("X", {"mm2"}).In("Y", {"b"}).Out("Out", {"y2"}).Build()};
  c.inputs = {{"x", {13, 29}}, {"w", {29, 19}}, {"b", {19}}, {"g", {29, 19}}, {"lr", {1}}};
  c.outputs = {"y", "y2", "w"};
  c.options.amp_compute = ComputeType::kBF16;
  CheckLoweringGolden(c);
  // y2 from a stale copy of w would be off by up to lr * |g| * 29 * 2 = 232.
  c.output_atol = {{"w", 1e-5}};
  const auto obj = CheckLoweringNumerics(c, Bf16Atol(29), 0);
  EXPECT_FALSE(StepMatched(*obj, "bf16_weight_copies")) << obj->lowering;
}

// The copy rounds as oneDNN's reorder does: a matmul on a bf16 copy of W
// equals the same matmul converting f32 W itself, bit for bit, plain and
// transposed, at odd sizes.
TEST(Bf16WeightCopiesTest, AMatmulOnTheCopyEqualsOneThatConvertsWItself) {
  KILN_SKIP_WITHOUT_BF16();
  std::mt19937 rng(3);
  for (bool transpose : {false, true}) {
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{7, 33, 19}, {64, 128, 96}, {3, 1, 5}, {37, 19, 29}, {29, 37, 19}}) {
      const Dims wd = transpose ? Dims{n, k} : Dims{k, n};
      Tensor x = RandomTensor({m, k}, DataType::kFP32, rng, -2.0, 2.0);
      Tensor w = RandomTensor(wd, DataType::kFP32, rng, -2.0, 2.0);
      std::vector<uint16_t> w16(static_cast<size_t>(w.numel()));
      for (int64_t i = 0; i < w.numel(); ++i) w16[i] = FloatToBf16Bits(w.data<float>()[i]);
      jit::FusedMatmulSpec spec;
      spec.x_dims = {m, k};
      spec.w_dims = wd;
      spec.transpose_w = transpose;
      spec.compute = ComputeType::kBF16;
      Tensor want(DataType::kFP32, {m, n}), got(DataType::kFP32, {m, n});
      const auto convert = jit::MakeFusedMatmulKernel(spec, onednn::Settings{}, "convert");
      runtime::BufferView a1[] = {{x.raw_data()}, {w.raw_data()}, {want.raw_mutable_data()}};
      convert->Run(a1);
      spec.w_dtype = DataType::kBF16;
      const auto copy = jit::MakeFusedMatmulKernel(spec, onednn::Settings{}, "copy");
      runtime::BufferView a2[] = {{x.raw_data()}, {w16.data()}, {got.raw_mutable_data()}};
      copy->Run(a2);
      EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), sizeof(float) * m * n), 0)
          << m << "x" << k << "x" << n << (transpose ? " transposed" : "");
      EXPECT_NE(copy->Describe().find("W a bf16 copy"), std::string::npos) << copy->Describe();
      // Both are the exact product of the rounded operands, up to f32
      // accumulation: within 2^-20 * K * sum |x w| of it (loose, and far
      // below a bf16 rounding step).
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double exact = 0, mag = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double xv = RoundThroughBf16(x.data<float>()[i * k + p]);
            const double wv = Bf16BitsToFloat(w16[transpose ? j * k + p : p * n + j]);
            exact += xv * wv;
            mag += std::fabs(xv * wv);
          }
          ASSERT_NEAR(got.data<float>()[i * n + j], exact, std::ldexp(mag, -20) * k + 1e-30)
              << m << "x" << k << "x" << n << (transpose ? " transposed" : "") << " at " << i << "," << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::test
