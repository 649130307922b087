// cumsum: ONNX CumSum's examples (inclusive, exclusive, reverse), axes and
// flatten, integer dtypes, the grad by finite differences in every mode,
// the registry entry, errors, and the framework kernel inside a cluster.
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

proto::OpDesc Cumsum(int64_t axis, bool exclusive = false, bool reverse = false, bool flatten = false) {
  return OpBuilder("cumsum")
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("axis", axis)
      .Attr("exclusive", exclusive)
      .Attr("reverse", reverse)
      .Attr("flatten", flatten)
      .Build();
}

TEST(CumsumOpTest, OnnxExamples) {
  const Tensor x = test::CastTo(FloatTensor({5}, {1, 2, 3, 4, 5}), DataType::kFP64);
  auto run = [&](bool exclusive, bool reverse) {
    return ValuesOf<double>(RunAndGet(Cumsum(0, exclusive, reverse), {{"x", x}}, "out"));
  };
  EXPECT_EQ(run(false, false), (std::vector<double>{1, 3, 6, 10, 15}));
  EXPECT_EQ(run(true, false), (std::vector<double>{0, 1, 3, 6, 10}));
  EXPECT_EQ(run(false, true), (std::vector<double>{15, 14, 12, 9, 5}));
  EXPECT_EQ(run(true, true), (std::vector<double>{14, 12, 9, 5, 0}));
}

TEST(CumsumOpTest, AxesFlattenAndDtypes) {
  const Tensor x = FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(ValuesOf<float>(RunAndGet(Cumsum(0), {{"x", x}}, "out")), (std::vector<float>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(ValuesOf<float>(RunAndGet(Cumsum(-1), {{"x", x}}, "out")), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  const Tensor flat = RunAndGet(Cumsum(0, false, true, true), {{"x", x}}, "out");
  EXPECT_EQ(flat.dims(), (Dims{6}));
  EXPECT_EQ(ValuesOf<float>(flat), (std::vector<float>{21, 20, 18, 15, 11, 6}));
  EXPECT_EQ(ValuesOf<int64_t>(RunAndGet(Cumsum(1, true), {{"x", test::Int64Tensor({2, 2}, {5, -7, 1, 1})}}, "out")),
            (std::vector<int64_t>{0, 5, 0, 1}));
  // i32 wraps as its own sum would.
  EXPECT_EQ(ValuesOf<int32_t>(RunAndGet(Cumsum(0), {{"x", TypedTensor<int32_t>({2}, {INT32_MAX, 1})}}, "out")),
            (std::vector<int32_t>{INT32_MAX, INT32_MIN}));
  EXPECT_EQ(RunAndGet(Cumsum(1), {{"x", FloatTensor({2, 0}, {})}}, "out").dims(), (Dims{2, 0}));
}

TEST(CumsumOpTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(11);
  const Tensor x = test::RandomTensor({3, 4}, DataType::kFP64, rng);
  for (int64_t axis : {0, 1, -1}) {
    for (bool exclusive : {false, true}) {
      for (bool reverse : {false, true}) {
        for (bool flatten : {false, true}) {
          EXPECT_EQ(CheckGrad(Cumsum(axis, exclusive, reverse, flatten), {{"x", x}}, {"x"}, {"out"}), "")
              << axis << exclusive << reverse << flatten;
        }
      }
    }
  }
}

TEST(CumsumOpTest, RegistryEntryAndErrors) {
  const OpInfo& info = OpRegistry::Global().Get("cumsum");
  EXPECT_EQ(info.jit, JitLowering::kFramework);
  EXPECT_EQ(std::get<int64_t>(*info.FindAttr("axis")->default_value), -1);
  EXPECT_EQ(OpRegistry::Global().Get("cumsum_grad").no_need_buffer, std::vector<std::string>{"X"});
  const Tensor x = FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6});
  std::string e = ErrorOf([&] { test::RunOp(Cumsum(2), {{"x", x}}); });
  EXPECT_NE(e.find("cumsum"), std::string::npos) << e;
  EXPECT_NE(e.find("attribute axis"), std::string::npos) << e;
  e = ErrorOf([] { test::RunOp(Cumsum(0), {{"x", TypedTensor<bool>({1}, {true})}}); });
  EXPECT_NE(e.find("input X: expected dtype f32, f64, i64 or i32, got bool"), std::string::npos) << e;
  e = ErrorOf([&] {
    const proto::OpDesc g = OpRegistry::Global().Get("cumsum").grad_maker(Cumsum(0, false, false, true))[0];
    test::RunOp(g, {{"x", x}, {"out@GRAD", x}});
  });
  EXPECT_NE(e.find("cumsum_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("input Out@GRAD: expected dims [6] (as Out), got [2,3]"), std::string::npos) << e;
}

TEST(CumsumOpJitTest, FrameworkKernelsRunInsideACluster) {
  test::LoweringCase c;
  c.name = "cumsum";
  const proto::OpDesc fwd = Cumsum(1, true, true);
  c.ops = {fwd, OpRegistry::Global().Get("cumsum").grad_maker(fwd)[0],
           OpBuilder("elementwise_max").In("X", {"x@GRAD"}).In("Y", {"y"}).Out("Out", {"m"}).Build()};
  c.inputs = {{"x", {5, 7}}, {"out@GRAD", {5, 7}}, {"y", {7}}};
  c.outputs = {"out", "m"};
  const auto obj = test::CheckLoweringNumerics(c, 1e-6, 1e-6);
  ASSERT_EQ(obj->program.instructions.size(), 3u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name(), "cumsum") << obj->Listing();
  EXPECT_EQ(obj->program.instructions[1].kernel->name(), "cumsum_grad") << obj->Listing();
}

}  // namespace
}  // namespace kiln
