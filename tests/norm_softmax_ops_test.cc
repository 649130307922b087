// softmax, softmax_with_cross_entropy, layer_norm and their grads: values
// against direct computations, gradients against finite differences, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "framework/op_registry.h"
#include "framework/validate.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;

using test::CheckGrad;
using test::CompareTensors;
using test::RandomTensor;
using test::RunOp;
using test::ValueAt;

// [outer, d, inner] around `axis`.
void Split(const Dims& dims, int64_t axis, int64_t* outer, int64_t* d, int64_t* inner) {
  *outer = *inner = 1;
  for (int64_t k = 0; k < axis; ++k) *outer *= dims[k];
  *d = dims[axis];
  for (size_t k = axis + 1; k < dims.size(); ++k) *inner *= dims[k];
}

// softmax along `axis` from the definition exp(x_i) / sum_j exp(x_j), in long
// double with a max shift so large logits do not overflow.
Tensor NaiveSoftmax(const Tensor& x, int64_t axis) {
  int64_t outer, d, inner;
  Split(x.dims(), axis, &outer, &d, &inner);
  Tensor out(DataType::kFP64, x.dims());
  double* p = out.mutable_data<double>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      long double m = -INFINITY, sum = 0;
      for (int64_t a = 0; a < d; ++a) m = std::max<long double>(m, ValueAt(x, (o * d + a) * inner + i));
      for (int64_t a = 0; a < d; ++a) sum += std::exp(ValueAt(x, (o * d + a) * inner + i) - m);
      for (int64_t a = 0; a < d; ++a) {
        p[(o * d + a) * inner + i] = static_cast<double>(std::exp(ValueAt(x, (o * d + a) * inner + i) - m) / sum);
      }
    }
  }
  return out;
}

proto::OpDesc SoftmaxOp(int64_t axis, const std::string& out = "y") {
  return OpBuilder("softmax").In("X", {"x"}).Out("Out", {out}).Attr("axis", axis).Build();
}

TEST(SoftmaxOpTest, MatchesNaiveFp32AndFp64) {
  std::mt19937 rng(31);
  const std::vector<std::pair<Dims, int64_t>> cases = {
      {{1, 1}, -1}, {{7, 17}, -1}, {{2, 33, 5}, 1}, {{3, 7}, 0}, {{33}, -1}, {{2, 3, 17}, -1}};
  for (const auto& [dims, axis] : cases) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      Tensor x = RandomTensor(dims, dtype, rng, -5, 5);
      auto scope = RunOp(SoftmaxOp(axis), {{"x", x}});
      const double tol = dtype == DataType::kFP32 ? 1e-6 : 1e-14;
      const int64_t a = axis < 0 ? axis + static_cast<int64_t>(dims.size()) : axis;
      EXPECT_EQ(CompareTensors(scope->GetVar("y")->Get(), NaiveSoftmax(x, a), tol, tol), "")
          << DimsToString(dims) << " axis " << axis;
    }
  }
}

TEST(SoftmaxOpTest, LargeLogitsAreStable) {
  Tensor x = test::FloatTensor({2, 3}, {1000, 1001, 1002, -1000, -1000, -1000});
  auto scope = RunOp(SoftmaxOp(-1), {{"x", x}});
  EXPECT_EQ(CompareTensors(scope->GetVar("y")->Get(), NaiveSoftmax(x, 1), 1e-6, 1e-6), "");
}

TEST(SoftmaxOpTest, RunsInPlace) {
  std::mt19937 rng(32);
  Tensor x = RandomTensor({5, 17}, DataType::kFP32, rng);
  auto scope = RunOp(SoftmaxOp(-1, "x"), {{"x", x}});
  EXPECT_EQ(CompareTensors(scope->GetVar("x")->Get(), NaiveSoftmax(x, 1), 1e-6, 1e-6), "");
  const OpInfo& info = OpRegistry::Global().Get("softmax");
  ASSERT_EQ(info.inplace.size(), 1u);
  EXPECT_EQ(info.inplace[0], (std::pair<std::string, std::string>{"X", "Out"}));
}

TEST(SoftmaxOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(33);
  const std::vector<std::pair<Dims, int64_t>> cases = {{{1, 1}, -1}, {{7, 5}, -1}, {{2, 7, 3}, 1}, {{3, 4}, 0}};
  for (const auto& [dims, axis] : cases) {
    EXPECT_EQ(CheckGrad(SoftmaxOp(axis), {{"x", RandomTensor(dims, DataType::kFP64, rng)}}, {"x"}, {"y"}), "")
        << DimsToString(dims) << " axis " << axis;
  }
}

TEST(SoftmaxOpTest, GradRunsInPlaceOnOutGrad) {
  std::mt19937 rng(34);
  Tensor y = NaiveSoftmax(RandomTensor({4, 9}, DataType::kFP64, rng), 1);
  Tensor dy = RandomTensor({4, 9}, DataType::kFP64, rng);
  auto op = [](const std::string& dx) {
    return OpBuilder("softmax_grad").In("Out", {"y"}).In("Out@GRAD", {"dy"}).Out("X@GRAD", {dx}).Build();
  };
  auto separate = RunOp(op("dx"), {{"y", y}, {"dy", dy}});
  auto in_place = RunOp(op("dy"), {{"y", y}, {"dy", dy}});
  EXPECT_EQ(CompareTensors(in_place->GetVar("dy")->Get(), separate->GetVar("dx")->Get(), 0, 0), "");
}

// ---- softmax_with_cross_entropy ---------------------------------------------------------

proto::OpDesc CrossEntropyOp(int64_t axis = -1) {
  return OpBuilder("softmax_with_cross_entropy")
      .In("Logits", {"x"})
      .In("Label", {"label"})
      .Out("Softmax", {"sm"})
      .Out("Loss", {"loss"})
      .Attr("axis", axis)
      .Build();
}

Tensor RandomLabels(const Dims& dims, int64_t classes, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> dist(0, classes - 1);
  std::vector<int64_t> v(Numel(dims));
  for (auto& l : v) l = dist(rng);
  return test::Int64Tensor(dims, v);
}

TEST(CrossEntropyOpTest, MatchesNaiveFp32AndFp64) {
  std::mt19937 rng(41);
  const std::vector<std::pair<Dims, int64_t>> cases = {
      {{1, 1}, -1}, {{7, 17}, -1}, {{33, 10}, -1}, {{2, 5, 7}, -1}, {{3, 7, 2}, 1}};
  for (const auto& [dims, axis] : cases) {
    const int64_t a = axis < 0 ? axis + static_cast<int64_t>(dims.size()) : axis;
    Dims ldims = dims;
    ldims[a] = 1;
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      Tensor x = RandomTensor(dims, dtype, rng, -4, 4);
      Tensor label = RandomLabels(ldims, dims[a], rng);
      auto scope = RunOp(CrossEntropyOp(axis), {{"x", x}, {"label", label}});
      Tensor want_sm = NaiveSoftmax(x, a);
      Tensor want_loss(DataType::kFP64, ldims);
      int64_t outer, d, inner;
      Split(dims, a, &outer, &d, &inner);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t row = o * inner + i;
          const int64_t l = static_cast<int64_t>(ValueAt(label, row));
          want_loss.mutable_data<double>()[row] = -std::log(ValueAt(want_sm, (o * d + l) * inner + i));
        }
      }
      const double tol = dtype == DataType::kFP32 ? 1e-5 : 1e-12;
      EXPECT_EQ(CompareTensors(scope->GetVar("sm")->Get(), want_sm, tol, tol), "") << DimsToString(dims);
      EXPECT_EQ(CompareTensors(scope->GetVar("loss")->Get(), want_loss, tol, tol), "") << DimsToString(dims);
      EXPECT_EQ(scope->GetVar("loss")->Get().dtype(), dtype);
    }
  }
}

TEST(CrossEntropyOpTest, LossOfExtremeLogitsIsFinite) {
  // softmax[label] underflows to 0 in float; the loss must still be exact.
  Tensor x = test::FloatTensor({1, 3}, {0, 200, -200});
  auto scope = RunOp(CrossEntropyOp(), {{"x", x}, {"label", test::Int64Tensor({1, 1}, {2})}});
  EXPECT_NEAR(ValueAt(scope->GetVar("loss")->Get(), 0), 400.0, 1e-3);
}

TEST(CrossEntropyOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(42);
  const std::vector<std::pair<Dims, int64_t>> cases = {{{1, 1}, -1}, {{7, 5}, -1}, {{2, 3, 4}, -1}, {{3, 5, 2}, 1}};
  for (const auto& [dims, axis] : cases) {
    const int64_t a = axis < 0 ? axis + static_cast<int64_t>(dims.size()) : axis;
    Dims ldims = dims;
    ldims[a] = 1;
    std::map<std::string, Tensor> in = {{"x", RandomTensor(dims, DataType::kFP64, rng)},
                                        {"label", RandomLabels(ldims, dims[a], rng)}};
    EXPECT_EQ(CheckGrad(CrossEntropyOp(axis), in, {"x"}, {"loss"}), "") << DimsToString(dims);
    // A Softmax output that is also used downstream contributes its gradient.
    EXPECT_EQ(CheckGrad(CrossEntropyOp(axis), in, {"x"}, {"loss", "sm"}), "") << DimsToString(dims);
  }
  const OpInfo& info = OpRegistry::Global().Get("softmax_with_cross_entropy");
  EXPECT_EQ(info.no_grad_inputs, std::vector<std::string>{"Label"});
}

TEST(CrossEntropyOpTest, LabelOutOfRangeNamesOpRowAndValue) {
  std::mt19937 rng(43);
  Tensor x = RandomTensor({4, 10}, DataType::kFP32, rng);
  std::string msg = ErrorOf([&] { RunOp(CrossEntropyOp(), {{"x", x}, {"label", test::Int64Tensor({4, 1}, {1, 2, 10, 3})}}); });
  EXPECT_NE(msg.find("'softmax_with_cross_entropy'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("label 10 at row 2 is out of range [0, 10)"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(CrossEntropyOp(), {{"x", x}, {"label", test::Int64Tensor({4, 1}, {-1, 2, 1, 3})}}); });
  EXPECT_NE(msg.find("label -1 at row 0"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(CrossEntropyOp(), {{"x", x}, {"label", test::Int64Tensor({4}, {1, 2, 1, 3})}}); });
  EXPECT_NE(msg.find("input Label: expected dims [4,1]"), std::string::npos) << msg;
  msg = ErrorOf([&] { RunOp(CrossEntropyOp(), {{"x", x}, {"label", test::FloatTensor({4, 1}, {1, 2, 1, 3})}}); });
  EXPECT_NE(msg.find("input Label: expected dtype i64"), std::string::npos) << msg;
}

// ---- layer_norm -----------------------------------------------------------------------------

proto::OpDesc LayerNormOp(int64_t begin, bool scale, bool bias, bool stats, float eps = 1e-5f) {
  OpBuilder b("layer_norm");
  b.In("X", {"x"}).Out("Y", {"y"}).Attr("begin_norm_axis", begin).Attr("epsilon", eps);
  if (scale) b.In("Scale", {"scale"});
  if (bias) b.In("Bias", {"bias"});
  if (stats) b.Out("Mean", {"mean"}).Out("Variance", {"var"});
  return b.Build();
}

struct LayerNormWant {
  Tensor y, mean, var;
};

LayerNormWant NaiveLayerNorm(const Tensor& x, int64_t begin, const Tensor* scale, const Tensor* bias, double eps) {
  int64_t left = 1, right = 1;
  for (int64_t k = 0; k < static_cast<int64_t>(x.rank()); ++k) (k < begin ? left : right) *= x.dim(k);
  LayerNormWant w{Tensor(DataType::kFP64, x.dims()), Tensor(DataType::kFP64, {left}),
                  Tensor(DataType::kFP64, {left})};
  for (int64_t r = 0; r < left; ++r) {
    long double mean = 0, var = 0;
    for (int64_t j = 0; j < right; ++j) mean += ValueAt(x, r * right + j);
    mean /= right;
    for (int64_t j = 0; j < right; ++j) var += std::pow(ValueAt(x, r * right + j) - mean, 2);
    var /= right;
    for (int64_t j = 0; j < right; ++j) {
      long double v = (ValueAt(x, r * right + j) - mean) / std::sqrt(var + eps);
      if (scale) v *= ValueAt(*scale, j);
      if (bias) v += ValueAt(*bias, j);
      w.y.mutable_data<double>()[r * right + j] = static_cast<double>(v);
    }
    w.mean.mutable_data<double>()[r] = static_cast<double>(mean);
    w.var.mutable_data<double>()[r] = static_cast<double>(var);
  }
  return w;
}

TEST(LayerNormOpTest, MatchesNaiveFp32AndFp64) {
  std::mt19937 rng(51);
  const std::vector<std::pair<Dims, int64_t>> cases = {
      {{1, 1}, 1}, {{7, 17}, 1}, {{2, 3, 5}, 1}, {{2, 3, 33}, 2}, {{33, 7}, 1}, {{1, 2, 3, 7}, 3}};
  for (const auto& [dims, begin] : cases) {
    int64_t right = 1;
    for (size_t k = begin; k < dims.size(); ++k) right *= dims[k];
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool with_affine = variant != 1;
        Tensor x = RandomTensor(dims, dtype, rng, -3, 2);
        Tensor scale = RandomTensor({right}, dtype, rng, 0.5, 1.5);
        Tensor bias = RandomTensor({right}, dtype, rng);
        std::map<std::string, Tensor> in = {{"x", x}};
        if (with_affine) in["scale"] = scale, in["bias"] = bias;
        const float eps = variant == 2 ? 0.1f : 1e-5f;
        auto scope = RunOp(LayerNormOp(begin, with_affine, with_affine, true, eps), in);
        LayerNormWant want =
            NaiveLayerNorm(x, begin, with_affine ? &scale : nullptr, with_affine ? &bias : nullptr, eps);
        const double tol = dtype == DataType::kFP32 ? 2e-5 : 1e-11;
        EXPECT_EQ(CompareTensors(scope->GetVar("y")->Get(), want.y, tol, tol), "") << DimsToString(dims);
        EXPECT_EQ(CompareTensors(scope->GetVar("mean")->Get(), want.mean, tol, tol), "") << DimsToString(dims);
        EXPECT_EQ(CompareTensors(scope->GetVar("var")->Get(), want.var, tol, tol), "") << DimsToString(dims);
      }
    }
  }
}

TEST(LayerNormOpTest, GradMatchesFiniteDifferences) {
  std::mt19937 rng(52);
  const std::vector<std::pair<Dims, int64_t>> cases = {{{3, 1}, 1}, {{4, 7}, 1}, {{2, 3, 5}, 1}, {{2, 3, 5}, 2}};
  for (const auto& [dims, begin] : cases) {
    int64_t right = 1;
    for (size_t k = begin; k < dims.size(); ++k) right *= dims[k];
    std::map<std::string, Tensor> in = {{"x", RandomTensor(dims, DataType::kFP64, rng, -2, 2)},
                                        {"scale", RandomTensor({right}, DataType::kFP64, rng, 0.5, 1.5)},
                                        {"bias", RandomTensor({right}, DataType::kFP64, rng)}};
    test::GradCheckOptions opts;
    opts.atol = 1e-5;
    EXPECT_EQ(CheckGrad(LayerNormOp(begin, true, true, true), in, {"x", "scale", "bias"}, {"y"}, opts), "")
        << DimsToString(dims);
    // Without Mean/Variance outputs the grad op recomputes them.
    EXPECT_EQ(CheckGrad(LayerNormOp(begin, true, true, false), in, {"x", "scale"}, {"y"}, opts), "")
        << DimsToString(dims);
    // Without Scale and Bias.
    EXPECT_EQ(CheckGrad(LayerNormOp(begin, false, false, true), {{"x", in["x"]}}, {"x"}, {"y"}, opts), "")
        << DimsToString(dims);
  }
}

TEST(LayerNormOpTest, BadInputsAndBuildTimeShapes) {
  std::mt19937 rng(53);
  std::string msg = ErrorOf([&] {
    RunOp(LayerNormOp(2, false, false, false), {{"x", RandomTensor({3, 4}, DataType::kFP32, rng)}});
  });
  EXPECT_NE(msg.find("'begin_norm_axis' must be in [1, 2)"), std::string::npos) << msg;
  msg = ErrorOf([&] {
    RunOp(LayerNormOp(1, true, false, false), {{"x", RandomTensor({3, 4}, DataType::kFP32, rng)},
                                               {"scale", RandomTensor({5}, DataType::kFP32, rng)}});
  });
  EXPECT_NE(msg.find("input Scale: expected dims [4]"), std::string::npos) << msg;

  proto::BlockDesc block;
  for (const auto& [name, dims] : {std::pair<std::string, Dims>{"x", {-1, 7, 16}}, {"scale", {16}}, {"bias", {16}}}) {
    proto::VarDesc* v = block.add_vars();
    v->set_name(name);
    for (int64_t d : dims) v->add_dims(d);
  }
  *block.add_ops() = LayerNormOp(2, true, true, true);
  InferShapeAtBuild(&block, 0, /*declare_outputs=*/true);
  EXPECT_EQ(VarDims(*FindVarDesc(block, "y")), (Dims{-1, 7, 16}));
  EXPECT_EQ(VarDims(*FindVarDesc(block, "mean")), (Dims{-1}));
  EXPECT_EQ(VarDims(*FindVarDesc(block, "var")), (Dims{-1}));
}

TEST(NormSoftmaxOpsTest, RegistryEntries) {
  for (const char* type : {"softmax", "softmax_grad", "layer_norm", "layer_norm_grad"}) {
    EXPECT_EQ(OpRegistry::Global().Get(type).jit, JitLowering::kOneDnn) << type;
  }
  for (const char* type : {"softmax", "softmax_grad", "softmax_with_cross_entropy",
                           "softmax_with_cross_entropy_grad", "layer_norm", "layer_norm_grad"}) {
    EXPECT_FALSE(OpRegistry::Global().Get(type).doc.empty()) << type;
  }
}

}  // namespace
}  // namespace kiln
