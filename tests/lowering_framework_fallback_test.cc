// Lowering step framework_fallback (compiler/lowering/framework_fallback.h)
// and per-unit fallback (compiler/lower.cc): a unit that cannot be compiled
// falls back alone to framework kernels while the rest stays compiled.
#include <gtest/gtest.h>

#include "framework/ew/ew_fragment.h"
#include "framework/op_registry.h"
#include "runtime/runner.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln::test {
namespace {

// X [2,3,2,3,2,3] + Y [2,1,2,1,2,1] alternates broadcast in every dim: its
// group cannot be laid out in 4 dims. The relu chain beside it compiles.
LoweringCase Uncollapsible(const std::string& name) {
  LoweringCase c;
  c.name = name;
  c.ops = {OpBuilder("elementwise_add").In("X", {"x"}).In("Y", {"y"}).Out("Out", {"sum"}).Build(),
           OpBuilder("relu").In("X", {"z"}).Out("Out", {"r"}).Build(),
           OpBuilder("scale").In("X", {"r"}).Out("Out", {"s"}).Attr("scale", 3.0f).Build()};
  c.inputs = {{"x", {2, 3, 2, 3, 2, 3}}, {"y", {2, 1, 2, 1, 2, 1}}, {"z", {4, 9}}};
  c.outputs = {"sum", "s"};
  return c;
}

TEST(FrameworkFallbackTest, AUnitThatCannotBeCompiledFallsBackAlone) {
  const LoweringCase c = Uncollapsible("framework_fallback_unit");
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  ASSERT_EQ(obj->unit_fallbacks.size(), 1u) << obj->lowering;
  EXPECT_NE(obj->unit_fallbacks[0].find("ew_group of #0 elementwise_add (step elementwise_groups)"),
            std::string::npos)
      << obj->unit_fallbacks[0];
  // The add runs its framework oneDNN kernel; relu and scale stay generated.
  EXPECT_TRUE(StepMatched(*obj, "onednn_anchors")) << obj->lowering;
  EXPECT_TRUE(StepMatched(*obj, "elementwise_groups")) << obj->lowering;
  // Without oneDNN, the reference kernel.
  LoweringCase reference = c;
  reference.options.use_onednn = false;
  const auto ref = CheckLoweringNumerics(reference);
  EXPECT_EQ(ref->unit_fallbacks.size(), 1u) << ref->lowering;
  EXPECT_TRUE(StepMatched(*ref, "framework_fallback")) << ref->lowering;
}

// Everything lowers: the last step has nothing left to take.
TEST(FrameworkFallbackTest, DoesNotFireWhenEveryOpIsClaimed) {
  LoweringCase c = Uncollapsible("framework_fallback_not_fired");
  c.ops.erase(c.ops.begin());
  c.inputs.erase(c.inputs.begin(), c.inputs.begin() + 2);
  c.outputs = {"s"};
  CheckLoweringGolden(c);
  const auto obj = CheckLoweringNumerics(c);
  EXPECT_FALSE(StepMatched(*obj, "framework_fallback")) << obj->lowering;
  EXPECT_TRUE(obj->unit_fallbacks.empty());
}

// A registry whose relu fragments compute one value more than they write
// (a broken registry entry).
void BreakReluFragments(OpRegistry& registry) {
  OpInfo& relu = *registry.FindMutable("relu");
  relu.elementwise = [fragments = relu.elementwise](const EwOpView& op) {
    std::vector<EwFragment> fs = fragments(op);
    for (EwFragment& f : fs) {
      f.emit = [emit = f.emit](EwProgram& p, const std::vector<EwValue>& in) {
        std::vector<EwValue> out = emit(p, in);
        out.push_back(out.front());
        return out;
      };
    }
    return fs;
  };
}

// A group that breaks an invariant while emitting throws instead of
// aborting the process: it falls back alone, and the trace says why.
TEST(FrameworkFallbackTest, AGroupThatBreaksAnInvariantWhileEmittingFallsBack) {
  OpRegistry registry;
  RegisterAllOps(registry);
  BreakReluFragments(registry);
  LoweringCase c;
  c.ops = {OpBuilder("relu").In("X", {"z"}).Out("Out", {"r"}).Build(),
           OpBuilder("scale").In("X", {"r"}).Out("Out", {"s"}).Attr("scale", 3.0f).Build()};
  c.inputs = {{"z", {2, 3}}};
  c.outputs = {"s"};
  const JitSubgraph sg = MakeSubgraph(c);
  const auto obj = jit::Lower(JitSubgraphFingerprint(sg), sg, SignatureOf(c), c.options, registry);
  ASSERT_EQ(obj->unit_fallbacks.size(), 1u) << obj->lowering;
  EXPECT_NE(obj->unit_fallbacks[0].find("ew_group of #0 relu, #1 scale (step elementwise_groups) could not be "
                                        "compiled: op #0 relu: its elementwise fragment computes 2 values for 1 "
                                        "writes"),
            std::string::npos)
      << obj->unit_fallbacks[0];
  EXPECT_FALSE(StepMatched(*obj, "elementwise_groups")) << obj->lowering;
  // The framework kernels compute 3 * relu(z).
  Tensor z = FloatTensor({2, 3}, {-1.0f, 0.5f, 2.0f, -3.0f, 0.0f, 1.0f}), s(DataType::kFP32, {2, 3});
  runtime::Runner::Run(obj->program, {z.raw_data()}, {s.mutable_data<float>()});
  EXPECT_EQ(CompareTensors(s, FloatTensor({2, 3}, {0.0f, 1.5f, 6.0f, 0.0f, 0.0f, 3.0f}), 0.0, 0.0), "");
}

}  // namespace
}  // namespace kiln::test

namespace kiln::test {
namespace {

// A framework kernel the in-place pass would run in place (sum over X[0])
// writes its output over X[0] when X[0] dies there, as a generated kernel
// does; the values are the reference's.
TEST(FrameworkFallbackTest, SumWritesOverItsFirstInputWhenItDies) {
  LoweringCase c;
  c.name = "framework_fallback_sum_in_place";
  c.ops = {OpBuilder("relu").In("X", {"a"}).Out("Out", {"ra"}).Build(),
           OpBuilder("relu").In("X", {"b"}).Out("Out", {"rb"}).Build(),
           OpBuilder("sum").In("X", {"ra", "rb"}).Out("Out", {"t"}).Build(),
           OpBuilder("scale").In("X", {"t"}).Out("Out", {"out"}).Attr("scale", 2.0f).Build()};
  c.inputs = {{"a", {5, 37}}, {"b", {5, 37}}};
  c.outputs = {"out", "rb"};
  const auto obj = CheckLoweringNumerics(c, 1e-6, 1e-6);
  const auto& buffers = obj->program.plan.buffers;
  auto find = [&](const std::string& name) -> const runtime::BufferInfo& {
    for (const auto& b : buffers) {
      if (b.name == name) return b;
    }
    ADD_FAILURE() << "no buffer " << name;
    return buffers.front();
  };
  EXPECT_EQ(find("t").region, find("ra").region) << obj->Listing();
  EXPECT_EQ(find("t").offset, find("ra").offset) << obj->Listing();
}

}  // namespace
}  // namespace kiln::test
