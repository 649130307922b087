// tile and expand_v2: values (rank growth, zeros, every dtype), ONNX
// Expand's bidirectional rule, grads by finite differences, registry
// entries, errors, expand_v2 and its grad in generated kernels against the
// reference kernels on both ISAs, and tile's framework kernel in a cluster.
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
using test::CompareTensors;
using test::ErrorOf;
using test::FloatTensor;
using test::RunAndGet;
using test::TypedTensor;
using test::ValuesOf;

proto::OpDesc Tile(const std::vector<int64_t>& reps) {
  return OpBuilder("tile").In("X", {"x"}).Out("Out", {"out"}).Attr("repeat_times", reps).Build();
}
proto::OpDesc Expand(const std::vector<int64_t>& shape) {
  return OpBuilder("expand_v2").In("X", {"x"}).Out("Out", {"out"}).Attr("shape", shape).Build();
}

TEST(TileExpandOpsTest, TileValues) {
  const Tensor x = FloatTensor({2, 2}, {1, 2, 3, 4});
  Tensor got = RunAndGet(Tile({2, 3}), {{"x", x}}, "out");
  EXPECT_EQ(got.dims(), (Dims{4, 6}));
  EXPECT_EQ(ValuesOf<float>(got), (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,
                                                      1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  // More repeats than dims: X is [1, 2, 2]; fewer: repeat_times is [1, 2].
  got = RunAndGet(Tile({2, 1, 1}), {{"x", x}}, "out");
  EXPECT_EQ(got.dims(), (Dims{2, 2, 2}));
  EXPECT_EQ(ValuesOf<float>(got), (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}));
  got = RunAndGet(Tile({2}), {{"x", x}}, "out");
  EXPECT_EQ(got.dims(), (Dims{2, 4}));
  EXPECT_EQ(ValuesOf<float>(got), (std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(RunAndGet(Tile({0, 1}), {{"x", x}}, "out").dims(), (Dims{0, 2}));
  EXPECT_EQ(ValuesOf<int64_t>(RunAndGet(Tile({3}), {{"x", test::Int64Tensor({1}, {-5})}}, "out")),
            (std::vector<int64_t>{-5, -5, -5}));
  EXPECT_EQ(ValuesOf<bool>(RunAndGet(Tile({2}), {{"x", TypedTensor<bool>({2}, {true, false})}}, "out")),
            (std::vector<bool>{true, false, true, false}));
}

TEST(TileExpandOpsTest, ExpandValues) {
  // [3, 1] to [2, 3, 4].
  const Tensor x = FloatTensor({3, 1}, {1, 2, 3});
  Tensor got = RunAndGet(Expand({2, 3, 4}), {{"x", x}}, "out");
  EXPECT_EQ(got.dims(), (Dims{2, 3, 4}));
  std::vector<float> want;
  for (int n = 0; n < 2; ++n) {
    for (float v : {1.0f, 2.0f, 3.0f}) want.insert(want.end(), 4, v);
  }
  EXPECT_EQ(ValuesOf<float>(got), want);
  // -1 keeps X's size; 1 keeps it too (ONNX's bidirectional broadcast).
  EXPECT_EQ(RunAndGet(Expand({-1, 5}), {{"x", x}}, "out").dims(), (Dims{3, 5}));
  EXPECT_EQ(RunAndGet(Expand({2, 1, 1}), {{"x", x}}, "out").dims(), (Dims{2, 3, 1}));
  // A shape shorter than X: its leading dims stay.
  const Tensor x3 = FloatTensor({2, 1, 2}, {1, 2, 3, 4});
  got = RunAndGet(Expand({3, 1}), {{"x", x3}}, "out");
  EXPECT_EQ(got.dims(), (Dims{2, 3, 2}));
  EXPECT_EQ(ValuesOf<float>(got), (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  EXPECT_EQ(ValuesOf<int32_t>(RunAndGet(Expand({2, 2}), {{"x", TypedTensor<int32_t>({2}, {7, 8})}}, "out")),
            (std::vector<int32_t>{7, 8, 7, 8}));
  EXPECT_EQ(RunAndGet(Expand({0, 3}), {{"x", FloatTensor({3}, {1, 2, 3})}}, "out").dims(), (Dims{0, 3}));
}

TEST(TileExpandOpsTest, GradsMatchFiniteDifferences) {
  std::mt19937 rng(7);
  const Tensor x = test::RandomTensor({2, 3}, DataType::kFP64, rng);
  for (const auto& reps : std::vector<std::vector<int64_t>>{{1, 1}, {2, 3}, {3, 1, 2}, {2}}) {
    EXPECT_EQ(CheckGrad(Tile(reps), {{"x", x}}, {"x"}, {"out"}), "") << DimsToString(reps);
  }
  const Tensor x1 = test::RandomTensor({3, 1}, DataType::kFP64, rng);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 4}, {2, 3, 5}, {-1, 1}, {2, 1, 1}}) {
    EXPECT_EQ(CheckGrad(Expand(shape), {{"x", x1}}, {"x"}, {"out"}), "") << DimsToString(shape);
  }
}

TEST(TileExpandOpsTest, RegistryEntries) {
  EXPECT_EQ(OpRegistry::Global().Get("tile").jit, JitLowering::kFramework);
  EXPECT_EQ(OpRegistry::Global().Get("tile_grad").jit, JitLowering::kFramework);
  EXPECT_EQ(OpRegistry::Global().Get("expand_v2").jit, JitLowering::kElementwise);
  EXPECT_EQ(OpRegistry::Global().Get("expand_v2_grad").jit, JitLowering::kElementwise);
  for (const std::string type : {"tile", "expand_v2"}) {
    const proto::OpDesc g = OpRegistry::Global().Get(type).grad_maker(type == "tile" ? Tile({2}) : Expand({2}))[0];
    EXPECT_EQ(g.type(), type + "_grad");
    EXPECT_EQ(OpRegistry::Global().Get(type + "_grad").no_need_buffer, std::vector<std::string>{"X"});
  }
}

TEST(TileExpandOpsTest, ErrorsNameTheOpAndTheProblem) {
  const Tensor x = FloatTensor({3, 2}, {1, 2, 3, 4, 5, 6});
  std::string e = ErrorOf([&] { test::RunOp(Tile({2, -1}), {{"x", x}}); });
  EXPECT_NE(e.find("tile"), std::string::npos) << e;
  EXPECT_NE(e.find("attribute repeat_times: expected values >= 0, got -1 at index 1"), std::string::npos) << e;
  e = ErrorOf([&] { test::RunOp(Expand({4, 2}), {{"x", x}}); });
  EXPECT_NE(e.find("expand_v2"), std::string::npos) << e;
  EXPECT_NE(e.find("input X [3,2] does not expand to attribute shape [4,2]: dim 0 is 3, expected 1 or 4"),
            std::string::npos)
      << e;
  e = ErrorOf([&] { test::RunOp(Expand({-1, 3, 2}), {{"x", x}}); });
  EXPECT_NE(e.find("attribute shape: -1 (keep X's size) in dim 0, which X [rank 2] does not have"), std::string::npos)
      << e;
  e = ErrorOf([&] { test::RunOp(Expand({-2, 2}), {{"x", x}}); });
  EXPECT_NE(e.find("attribute shape: expected sizes >= -1, got -2 for dim 0"), std::string::npos) << e;
  e = ErrorOf([&] {
    const proto::OpDesc g = OpRegistry::Global().Get("tile").grad_maker(Tile({2, 1}))[0];
    test::RunOp(g, {{"x", x}, {"out@GRAD", x}});
  });
  EXPECT_NE(e.find("tile_grad"), std::string::npos) << e;
  EXPECT_NE(e.find("input Out@GRAD: expected dims [6,2] (as Out), got [3,2]"), std::string::npos) << e;
}

// ---- the JIT ------------------------------------------------------------------------

TEST(TileExpandOpsJitTest, ExpandAndGradInGeneratedKernelsOnBothIsas) {
  struct Case {
    Dims x;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {{{1}, {17}},           {{7}, {3, 7}},        {{3, 1}, {3, 4099}},
                                   {{5, 1, 7}, {2, 5, 3, 7}}, {{16}, {-1}},     {{1, 33}, {4, 1}}};
  for (Isa isa : test::TestedIsas()) {
    for (const Case& k : cases) {
      for (bool grad : {false, true}) {
        SCOPED_TRACE(std::string(grad ? "grad " : "") + DimsToString(k.x) + " to " + DimsToString(k.shape) + " " +
                     IsaName(isa));
        test::LoweringCase c;
        c.name = "expand_v2";
        c.options.isa = isa;
        const proto::OpDesc fwd = Expand(k.shape);
        c.ops = {grad ? OpRegistry::Global().Get("expand_v2").grad_maker(fwd)[0] : fwd};
        c.inputs = {{"x", k.x}};
        const Dims out = RunAndGet(fwd, {{"x", FloatTensor(k.x, std::vector<float>(Numel(k.x)))}}, "out").dims();
        if (grad) c.inputs.push_back({"out@GRAD", out});
        c.outputs = {grad ? "x@GRAD" : "out"};
        // The forward copies; the grad sums up to 4099 terms in f32 where the reference sums in double.
        const auto obj = test::CheckLoweringNumerics(c, grad ? 1e-4 : 0, grad ? 1e-5 : 0);
        ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
        EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
      }
    }
  }
}

TEST(TileExpandOpsJitTest, BoolExpandAndTileInACluster) {
  test::LoweringCase c;
  c.name = "expand_bool";
  c.ops = {Expand({4, 3})};
  c.inputs = {{"x", {3}}};
  c.dtypes = {{"x", DataType::kBOOL}};
  c.outputs = {"out"};
  auto obj = test::CheckLoweringNumerics(c, 0, 0);
  EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
  // tile (framework) feeding a generated expand.
  c.name = "tile_expand";
  c.ops = {Tile({2, 3}), OpBuilder("expand_v2").In("X", {"out"}).Out("Out", {"e"}).Attr("shape", std::vector<int64_t>{5, -1, -1}).Build()};
  c.inputs = {{"x", {3, 2}}};
  c.dtypes.clear();
  c.outputs = {"e"};
  obj = test::CheckLoweringNumerics(c, 0, 0);
  ASSERT_EQ(obj->program.instructions.size(), 2u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name(), "tile") << obj->Listing();
}

}  // namespace
}  // namespace kiln
