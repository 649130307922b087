// logical_and, logical_or, logical_xor, logical_not, isnan, isinf: truth
// tables with broadcasting, NaN and infinities in f32 and f64, isinf's
// attributes, no gradients, errors, and the generated kernels against the
// reference kernels on both ISAs (f64 X runs the framework kernel inside the
// cluster).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "tests/op_test_util.h"
#include "tests/typed_tensor.h"
#include "tests/unary_op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;
using test::RunAndGet;
using test::TypedTensor;
using test::ValuesOf;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

proto::OpDesc Binary(const std::string& type, int64_t axis = -1) {
  return OpBuilder(type).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", axis).Build();
}

TEST(LogicalOpsTest, TruthTables) {
  const Tensor x = TypedTensor<bool>({4}, {false, false, true, true});
  const Tensor y = TypedTensor<bool>({4}, {false, true, false, true});
  EXPECT_EQ(ValuesOf<bool>(RunAndGet(Binary("logical_and"), {{"x", x}, {"y", y}}, "out")),
            (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(ValuesOf<bool>(RunAndGet(Binary("logical_or"), {{"x", x}, {"y", y}}, "out")),
            (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(ValuesOf<bool>(RunAndGet(Binary("logical_xor"), {{"x", x}, {"y", y}}, "out")),
            (std::vector<bool>{false, true, true, false}));
  const proto::OpDesc lnot = OpBuilder("logical_not").In("X", {"x"}).Out("Out", {"out"}).Build();
  EXPECT_EQ(ValuesOf<bool>(RunAndGet(lnot, {{"x", x}}, "out")), (std::vector<bool>{true, true, false, false}));
}

// Y [2] broadcast along X [2, 3]'s first dim (axis 0), and Y [3] on the last.
TEST(LogicalOpsTest, YBroadcastsIntoXFromAxis) {
  const Tensor x = TypedTensor<bool>({2, 3}, {true, false, true, true, true, false});
  EXPECT_EQ(ValuesOf<bool>(
                RunAndGet(Binary("logical_and", 0), {{"x", x}, {"y", TypedTensor<bool>({2}, {true, false})}}, "out")),
            (std::vector<bool>{true, false, true, false, false, false}));
  EXPECT_EQ(ValuesOf<bool>(RunAndGet(Binary("logical_or"), {{"x", x}, {"y", TypedTensor<bool>({3}, {false, true, false})}},
                                     "out")),
            (std::vector<bool>{true, true, true, true, true, false}));
}

TEST(LogicalOpsTest, IsNanAndIsInfInF32AndF64) {
  const std::vector<double> v = {kNaN, kInf, -kInf, 0, -1e30, 3};
  auto run = [](const std::string& type, const Tensor& x, const AttrMap& attrs = {}) {
    OpBuilder b(type);
    b.In("X", {"x"}).Out("Out", {"out"});
    for (const auto& [k, a] : attrs) b.Attr(k, a);
    const Tensor out = RunAndGet(b.Build(), {{"x", x}}, "out");
    EXPECT_EQ(out.dtype(), DataType::kBOOL);
    return ValuesOf<bool>(out);
  };
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const Tensor x = test::ValuesTensor(v, dtype);
    EXPECT_EQ(run("isnan", x), (std::vector<bool>{true, false, false, false, false, false}));
    EXPECT_EQ(run("isinf", x), (std::vector<bool>{false, true, true, false, false, false}));
    EXPECT_EQ(run("isinf", x, {{"detect_negative", false}}), (std::vector<bool>{false, true, false, false, false, false}));
    EXPECT_EQ(run("isinf", x, {{"detect_positive", false}}), (std::vector<bool>{false, false, true, false, false, false}));
    EXPECT_EQ(run("isinf", x, {{"detect_positive", false}, {"detect_negative", false}}), std::vector<bool>(6, false));
  }
}

TEST(LogicalOpsTest, NoneIsDifferentiable) {
  for (const std::string type : {"logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf"}) {
    const OpInfo& info = OpRegistry::Global().Get(type);
    EXPECT_FALSE(info.grad_maker) << type;
    EXPECT_EQ(info.jit, JitLowering::kElementwise) << type;
    EXPECT_NE(info.doc.find("Not differentiable"), std::string::npos) << info.doc;
  }
}

TEST(LogicalOpsTest, ErrorsNameTheOpAndTheProblem) {
  std::string e = ErrorOf([] {
    test::RunOp(Binary("logical_and"), {{"x", test::FloatTensor({2}, {1, 0})}, {"y", TypedTensor<bool>({2}, {1, 0})}});
  });
  EXPECT_NE(e.find("logical_and"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype bool, got f32"), std::string::npos) << e;
  e = ErrorOf([] {
    test::RunOp(Binary("logical_xor"), {{"x", TypedTensor<bool>({2, 3}, std::vector<bool>(6))},
                                        {"y", TypedTensor<bool>({2}, {1, 0})}});
  });
  EXPECT_NE(e.find("logical_xor"), std::string::npos) << e;
  EXPECT_NE(e.find("[2]"), std::string::npos) << e;
  e = ErrorOf([] {
    test::RunOp(OpBuilder("isnan").In("X", {"x"}).Out("Out", {"out"}).Build(), {{"x", test::Int64Tensor({1}, {1})}});
  });
  EXPECT_NE(e.find("isnan"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype f32 or f64, got i64"), std::string::npos) << e;
  e = ErrorOf([] {
    test::RunOp(OpBuilder("logical_not").In("X", {"x"}).Out("Out", {"out"}).Build(),
                {{"x", test::FloatTensor({1}, {1})}});
  });
  EXPECT_NE(e.find("logical_not"), std::string::npos) << e;
  EXPECT_NE(e.find("input X: expected dtype bool, got f32"), std::string::npos) << e;
}

// ---- the JIT ------------------------------------------------------------------------

void ExpectGenerated(const test::LoweringCase& c) {
  const auto obj = test::CheckLoweringNumerics(c, 0, 0);
  ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
}

TEST(LogicalOpsJitTest, GeneratedKernelsMatchTheReferenceOnBothIsas) {
  for (Isa isa : test::TestedIsas()) {
    for (const Dims& dims : {Dims{1}, Dims{15}, Dims{17}, Dims{4099}, Dims{3, 5, 7}}) {
      SCOPED_TRACE(DimsToString(dims) + " " + IsaName(isa));
      for (const std::string type : {"logical_and", "logical_or", "logical_xor"}) {
        test::LoweringCase c;
        c.name = type;
        c.options.isa = isa;
        c.ops = {Binary(type)};
        // Y broadcast along every dim but the last.
        c.inputs = {{"x", dims}, {"y", {dims.back()}}};
        c.dtypes = {{"x", DataType::kBOOL}, {"y", DataType::kBOOL}};
        c.outputs = {"out"};
        ExpectGenerated(c);
      }
      test::LoweringCase c;
      c.name = "logical_not";
      c.options.isa = isa;
      c.ops = {OpBuilder("logical_not").In("X", {"x"}).Out("Out", {"out"}).Build()};
      c.inputs = {{"x", dims}};
      c.dtypes = {{"x", DataType::kBOOL}};
      c.outputs = {"out"};
      ExpectGenerated(c);
    }
  }
}

TEST(LogicalOpsJitTest, IsNanAndIsInfGeneratedForF32AndFrameworkForF64) {
  std::vector<double> v;
  for (int i = 0; i < 37; ++i) v.push_back(i % 5 == 0 ? kNaN : i % 5 == 1 ? kInf : i % 5 == 2 ? -kInf : i - 18.5);
  const std::vector<AttrMap> isinf_attrs = {{},
                                            {{"detect_positive", false}},
                                            {{"detect_negative", false}},
                                            {{"detect_positive", false}, {"detect_negative", false}}};
  for (Isa isa : test::TestedIsas()) {
    for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
      std::vector<std::pair<std::string, AttrMap>> cases = {{"isnan", {}}};
      for (const AttrMap& a : isinf_attrs) cases.push_back({"isinf", a});
      for (const auto& [type, attrs] : cases) {
        SCOPED_TRACE(type + " " + DataTypeName(dtype) + " " + IsaName(isa));
        test::LoweringCase c;
        c.name = type;
        c.options.isa = isa;
        c.ops = {test::UnaryOp(type, attrs)};
        c.inputs = {{"x", {37}}};
        c.dtypes = {{"x", dtype}};
        c.given["x"] = test::ValuesTensor(v, dtype);
        c.outputs = {"out"};
        const auto obj = test::CheckLoweringNumerics(c, 0, 0);
        ASSERT_EQ(obj->program.instructions.size(), 1u);
        const std::string name = obj->program.instructions[0].kernel->name();
        if (dtype == DataType::kFP32) {
          EXPECT_EQ(name.rfind("ew_", 0), 0u) << obj->Listing();
        } else {
          EXPECT_EQ(name, type) << obj->Listing();
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln
