// pad: constant, reflect and edge against numpy.pad's results, negative
// paddings, every dtype, grads by finite differences in every mode, the
// registry entry, errors, and its framework kernel inside a cluster.
#include <gtest/gtest.h>

#include <cstdint>
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
using test::TypedTensor;
using test::ValuesOf;

proto::OpDesc Pad(const std::vector<int64_t>& paddings, const std::string& mode = "constant", float value = 0) {
  return OpBuilder("pad")
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("paddings", paddings)
      .Attr("mode", mode)
      .Attr("pad_value", value)
      .Build();
}

std::vector<float> Padded(const Tensor& x, const std::vector<int64_t>& p, const std::string& mode, float v = 0) {
  return ValuesOf<float>(RunAndGet(Pad(p, mode, v), {{"x", x}}, "out"));
}

// Expected values from numpy.pad (same paddings, as ((b0, a0), (b1, a1))).
TEST(PadOpTest, MatchesNumpyPad) {
  const Tensor v = FloatTensor({3}, {1, 2, 3});
  EXPECT_EQ(Padded(v, {4, 5}, "reflect"), (std::vector<float>{1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2}));
  EXPECT_EQ(Padded(v, {2, 1}, "edge"), (std::vector<float>{1, 1, 1, 2, 3, 3}));
  EXPECT_EQ(Padded(FloatTensor({1}, {7}), {2, 2}, "reflect"), (std::vector<float>{7, 7, 7, 7, 7}));
  const Tensor x = FloatTensor({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(Padded(x, {1, 0, 2, 1}, "reflect"),
            (std::vector<float>{5, 4, 3, 4, 5, 4, 2, 1, 0, 1, 2, 1, 5, 4, 3, 4, 5, 4}));
  EXPECT_EQ(Padded(x, {0, 1, 1, 2}, "edge"),
            (std::vector<float>{0, 0, 1, 2, 2, 2, 3, 3, 4, 5, 5, 5, 3, 3, 4, 5, 5, 5}));
  const Tensor c = RunAndGet(Pad({1, 1, 0, 0}, "constant", 9), {{"x", x}}, "out");
  EXPECT_EQ(c.dims(), (Dims{4, 3}));
  EXPECT_EQ(ValuesOf<float>(c), (std::vector<float>{9, 9, 9, 0, 1, 2, 3, 4, 5, 9, 9, 9}));
}

TEST(PadOpTest, NegativePaddingsCropAndEveryDtypeWorks) {
  const Tensor x = FloatTensor({2, 3}, {0, 1, 2, 3, 4, 5});
  // Cut the first column, add one after; cut the last row.
  const Tensor got = RunAndGet(Pad({0, -1, -1, 1}, "constant", -1), {{"x", x}}, "out");
  EXPECT_EQ(got.dims(), (Dims{1, 3}));
  EXPECT_EQ(ValuesOf<float>(got), (std::vector<float>{1, 2, -1}));
  EXPECT_EQ(Padded(x, {0, 0, -1, 2}, "edge"), (std::vector<float>{1, 2, 2, 2, 4, 5, 5, 5}));
  EXPECT_EQ(ValuesOf<int64_t>(RunAndGet(Pad({1, 2}, "constant", 4), {{"x", test::Int64Tensor({1}, {-3})}}, "out")),
            (std::vector<int64_t>{4, -3, 4, 4}));
  EXPECT_EQ(ValuesOf<bool>(RunAndGet(Pad({1, 0}, "constant", 1), {{"x", TypedTensor<bool>({1}, {false})}}, "out")),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(ValuesOf<int32_t>(RunAndGet(Pad({2, 2}, "reflect"), {{"x", TypedTensor<int32_t>({3}, {4, 5, 6})}}, "out")),
            (std::vector<int32_t>{6, 5, 4, 5, 6, 5, 4}));
  // A fully cut dim gives an empty tensor.
  EXPECT_EQ(RunAndGet(Pad({0, 0, -3, 0}), {{"x", x}}, "out").dims(), (Dims{2, 0}));
}

// Every mode is linear in X; reflect and edge read some elements several
// times, so their grads accumulate.
TEST(PadOpTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(9);
  const Tensor x = test::RandomTensor({3, 4}, DataType::kFP64, rng);
  for (const std::string mode : {"constant", "reflect", "edge"}) {
    for (const auto& p : std::vector<std::vector<int64_t>>{{1, 2, 0, 3}, {0, 0, 5, 1}, {-1, 2, 2, -2}}) {
      EXPECT_EQ(CheckGrad(Pad(p, mode, 0.5f), {{"x", x}}, {"x"}, {"out"}), "") << mode << DimsToString(p);
    }
  }
}

TEST(PadOpTest, RegistryEntry) {
  const OpInfo& info = OpRegistry::Global().Get("pad");
  EXPECT_EQ(info.jit, JitLowering::kFramework);
  EXPECT_EQ(std::get<std::string>(*info.FindAttr("mode")->default_value), "constant");
  EXPECT_EQ(std::get<float>(*info.FindAttr("pad_value")->default_value), 0.0f);
  EXPECT_EQ(OpRegistry::Global().Get("pad_grad").no_need_buffer, std::vector<std::string>{"X"});
}

TEST(PadOpTest, ErrorsNameTheOpAndTheProblem) {
  const Tensor x = FloatTensor({2, 3}, {0, 1, 2, 3, 4, 5});
  std::string e = ErrorOf([&] { test::RunOp(Pad({1, 1}), {{"x", x}}); });
  EXPECT_NE(e.find("pad"), std::string::npos) << e;
  EXPECT_NE(e.find("attribute paddings: expected 4 values (before and after for each of X's 2 dims), got 2"),
            std::string::npos)
      << e;
  e = ErrorOf([&] { test::RunOp(Pad({0, 0, 0, 0}, "wrap"), {{"x", x}}); });
  EXPECT_NE(e.find("attribute mode: expected \"constant\", \"reflect\" or \"edge\", got \"wrap\""), std::string::npos)
      << e;
  e = ErrorOf([&] { test::RunOp(Pad({0, 0, -2, -2}), {{"x", x}}); });
  EXPECT_NE(e.find("attribute paddings: dim 1 of X is 3 and paddings -2, -2 leave -1 elements"), std::string::npos)
      << e;
  e = ErrorOf([&] { test::RunOp(Pad({1, 0}, "edge"), {{"x", FloatTensor({0}, {})}}); });
  EXPECT_NE(e.find("input X: dim 0 is empty, and mode \"edge\" pads it from X's elements"), std::string::npos) << e;
  e = ErrorOf([&] {
    const proto::OpDesc g = OpRegistry::Global().Get("pad").grad_maker(Pad({1, 1, 0, 0}))[0];
    test::RunOp(g, {{"x", x}, {"out@GRAD", x}});
  });
  EXPECT_NE(e.find("pad_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("input Out@GRAD: expected dims [4,3] (as Out), got [2,3]"), std::string::npos) << e;
}

TEST(PadOpJitTest, FrameworkKernelRunsInsideACluster) {
  for (const std::string mode : {"constant", "reflect", "edge"}) {
    test::LoweringCase c;
    c.name = "pad";
    c.ops = {Pad({1, 2, 3, 0}, mode, 2),
             OpBuilder("elementwise_max").In("X", {"out"}).In("Y", {"y"}).Out("Out", {"m"}).Build()};
    c.inputs = {{"x", {4, 5}}, {"y", {8}}};
    c.outputs = {"m"};
    const auto obj = test::CheckLoweringNumerics(c, 0, 0);
    ASSERT_EQ(obj->program.instructions.size(), 2u) << obj->Listing();
    EXPECT_EQ(obj->program.instructions[0].kernel->name(), "pad") << obj->Listing();
  }
}

}  // namespace
}  // namespace kiln
