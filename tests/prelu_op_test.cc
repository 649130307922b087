// prelu: values in each mode (one slope, per channel NCHW and NHWC, per
// element for every slope shape ONNX allows), grads of X and Alpha by finite
// differences, errors, and the generated forward and grad against the
// reference kernels on both ISAs.
#include <gtest/gtest.h>

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
using test::ErrorOf;
using test::FloatTensor;
using test::RunAndGet;

proto::OpDesc Prelu(const std::string& mode, const std::string& format = "NCHW") {
  return OpBuilder("prelu")
      .In("X", {"x"})
      .In("Alpha", {"a"})
      .Out("Out", {"out"})
      .Attr("mode", mode)
      .Attr("data_format", format)
      .Build();
}

// "" when prelu gives `want` (within f32 rounding).
std::string Check(const std::string& mode, const Tensor& x, const Tensor& a, const std::vector<float>& want,
                  const std::string& format = "NCHW") {
  const Tensor got = RunAndGet(Prelu(mode, format), {{"x", x}, {"a", a}}, "out");
  return test::CompareTensors(got, FloatTensor(got.dims(), want), 0, 1e-7);
}

TEST(PreluOpTest, ValuesInEachMode) {
  // X [1, 2, 2]: channels 0 and 1.
  const Tensor x = FloatTensor({1, 2, 2}, {-1, 2, -3, -4});
  EXPECT_EQ(Check("all", x, FloatTensor({1}, {0.5f}), {-0.5f, 2, -1.5f, -2}), "");
  EXPECT_EQ(Check("channel", x, FloatTensor({2}, {0.1f, 0.2f}), {-0.1f, 2, -0.6f, -0.8f}), "");
  // NHWC: the last dim is the channel.
  EXPECT_EQ(Check("channel", x, FloatTensor({2}, {0.1f, 0.2f}), {-0.1f, 2, -0.3f, -0.8f}, "NHWC"), "");
  // ONNX slopes: [C, 1] per channel, [W] per column, X's own shape, a scalar-like [1, 1].
  EXPECT_EQ(Check("element", x, FloatTensor({2, 1}, {0.1f, 0.2f}), {-0.1f, 2, -0.6f, -0.8f}), "");
  EXPECT_EQ(Check("element", x, FloatTensor({2}, {0.1f, 0.2f}), {-0.1f, 2, -0.3f, -0.8f}), "");
  EXPECT_EQ(Check("element", x, FloatTensor({1, 2, 2}, {1, 2, 3, 4}), {-1, 2, -9, -16}), "");
  EXPECT_EQ(Check("element", x, FloatTensor({1, 1}, {2}), {-2, 2, -6, -8}), "");
  // Paddle's element slope [1, C, H, W] for X [N, C, H, W] (rank 4 both).
  const Tensor x4 = FloatTensor({2, 1, 1, 2}, {-1, -1, -1, 1});
  EXPECT_EQ(Check("element", x4, FloatTensor({1, 1, 1, 2}, {3, 4}), {-3, -4, -3, 1}), "");
}

TEST(PreluOpTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(17);
  struct Case {
    std::string mode, format;
    Dims x, a;
  };
  const std::vector<Case> cases = {{"all", "NCHW", {2, 3, 4}, {1}},       {"channel", "NCHW", {2, 3, 4}, {3}},
                                   {"channel", "NHWC", {2, 3, 4}, {4}},   {"element", "NCHW", {2, 3, 4}, {3, 1}},
                                   {"element", "NCHW", {2, 3, 4}, {3, 4}}, {"element", "NCHW", {2, 3, 4}, {2, 3, 4}}};
  for (const Case& k : cases) {
    Tensor x = test::RandomTensor(k.x, DataType::kFP64, rng, 0.1, 2);
    for (int64_t i = 0; i < x.numel(); i += 2) x.mutable_data<double>()[i] *= -1;
    const Tensor a = test::RandomTensor(k.a, DataType::kFP64, rng, 0, 0.5);
    EXPECT_EQ(CheckGrad(Prelu(k.mode, k.format), {{"x", x}, {"a", a}}, {"x", "a"}, {"out"}), "")
        << k.mode << " " << k.format << DimsToString(k.a);
  }
}

TEST(PreluOpTest, ErrorsNameTheOpAndTheProblem) {
  const Tensor x = FloatTensor({1, 2, 2}, {1, 2, 3, 4});
  std::string e = ErrorOf([&] { test::RunOp(Prelu("all"), {{"x", x}, {"a", FloatTensor({2}, {1, 2})}}); });
  EXPECT_NE(e.find("prelu"), std::string::npos) << e;
  EXPECT_NE(e.find("input Alpha: mode \"all\" expects one element, got [2]"), std::string::npos) << e;
  e = ErrorOf([&] { test::RunOp(Prelu("channel"), {{"x", x}, {"a", FloatTensor({3}, {1, 2, 3})}}); });
  EXPECT_NE(e.find("input Alpha: mode \"channel\" expects 2 elements (dim 1 of X [1,2,2]), got [3]"), std::string::npos)
      << e;
  e = ErrorOf([&] { test::RunOp(Prelu("element"), {{"x", x}, {"a", FloatTensor({3}, {1, 2, 3})}}); });
  EXPECT_NE(e.find("input Alpha [3]: mode \"element\" expects it to broadcast into X [1,2,2]"), std::string::npos) << e;
  e = ErrorOf([&] { test::RunOp(Prelu("element"), {{"x", x}, {"a", FloatTensor({2, 1, 1, 1}, {1, 2})}}); });
  EXPECT_NE(e.find("input Alpha [2,1,1,1]: mode \"element\""), std::string::npos) << e;
  e = ErrorOf([&] { test::RunOp(Prelu("row"), {{"x", x}, {"a", FloatTensor({1}, {1})}}); });
  EXPECT_NE(e.find("attribute mode: expected \"all\", \"channel\" or \"element\", got \"row\""), std::string::npos)
      << e;
  e = ErrorOf([&] { test::RunOp(Prelu("channel", "NDHW"), {{"x", x}, {"a", FloatTensor({2}, {1, 1})}}); });
  EXPECT_NE(e.find("attribute data_format: expected \"NCHW\" or \"NHWC\", got \"NDHW\""), std::string::npos) << e;
  e = ErrorOf([&] { test::RunOp(Prelu("all"), {{"x", x}, {"a", test::CastTo(FloatTensor({1}, {1}), DataType::kFP64)}}); });
  EXPECT_NE(e.find("input Alpha: expected dtype f32 (as X), got f64"), std::string::npos) << e;
}

// ---- the JIT ------------------------------------------------------------------------

TEST(PreluOpJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  struct Case {
    std::string mode, format;
    Dims x, a;
  };
  const std::vector<Case> cases = {{"all", "NCHW", {17}, {1}},
                                   {"channel", "NCHW", {3, 5, 7}, {5}},
                                   {"channel", "NHWC", {2, 9, 16}, {16}},
                                   {"element", "NCHW", {4, 3, 33}, {3, 1}},
                                   {"element", "NCHW", {4099}, {4099}},
                                   {"element", "NCHW", {2, 6, 5}, {1, 6, 5}}};
  for (Isa isa : test::TestedIsas()) {
    for (const Case& k : cases) {
      for (bool grad : {false, true}) {
        SCOPED_TRACE(k.mode + " " + DimsToString(k.x) + DimsToString(k.a) + (grad ? " grad " : " ") + IsaName(isa));
        test::LoweringCase c;
        c.name = "prelu";
        c.options.isa = isa;
        const proto::OpDesc fwd = Prelu(k.mode, k.format);
        c.ops = {grad ? OpRegistry::Global().Get("prelu").grad_maker(fwd)[0] : fwd};
        c.inputs = {{"x", k.x}, {"a", k.a}};
        if (grad) c.inputs.push_back({"out@GRAD", k.x});
        c.outputs = grad ? std::vector<std::string>{"x@GRAD", "a@GRAD"} : std::vector<std::string>{"out"};
        // Alpha@GRAD sums up to 4099 terms in f32 (the reference in double).
        const auto obj = test::CheckLoweringNumerics(c, grad ? 1e-4 : 0, grad ? 1e-5 : 0);
        ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
        EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
      }
    }
  }
}

}  // namespace
}  // namespace kiln
