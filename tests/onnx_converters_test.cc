// The converters issue 28's ops brought (framework/onnx/convert_unary.cc,
// convert_tile_pad.cc, Max/Min/Mod/Pow/logical ops in convert_math.cc, and
// Gather of run-time indices in convert_shape.cc, the losses in
// convert_loss.cc) on models built here: the
// ops and attributes each node becomes (ONNX's attribute names and defaults
// renamed, Pad's pads reordered into pairs), Max chained over broadcasting
// inputs and run, both operands broadcasting through expand_v2, Where's three
// inputs broadcast, integer Div of shapes folded, an
// embedding-style Gather with negative ids, GatherElements as
// take_along_axis, SoftmaxCrossEntropyLoss as
// log_softmax and nll_loss, and the refusals with their reasons. Their numerics
// against ONNX's own expected outputs: tests/onnx_node_tests.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/executor.h"
#include "framework/onnx/onnx_import.h"
#include "framework/op_desc.h"
#include "tests/onnx_model_builder.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::AttrFloat;
using test::AttrInt;
using test::OnnxModelBuilder;

std::vector<std::string> OpTypes(const OnnxImport& im) {
  std::vector<std::string> out;
  for (const auto& op : im.main.blocks(0).ops()) out.push_back(op.type());
  return out;
}

Attribute AttrOf(const OnnxImport& im, int op, const std::string& name) {
  const proto::AttrDesc* a = FindAttr(im.main.blocks(0).ops(op), name);
  KILN_CHECK(a != nullptr, "no attribute ", name);
  return AttrFromProto(*a);
}

std::string ImportError(const OnnxModelBuilder& m) {
  return test::ErrorOf([&] { ImportOnnxModelFromBytes(m.Bytes(), {}, "m.onnx"); });
}

// Runs the imported program on `feeds` (ONNX input name -> value); returns output 0.
Tensor RunImported(const OnnxImport& im, const std::map<std::string, Tensor>& feeds) {
  Scope scope;
  Executor exec;
  exec.RunProgram(im.startup, scope);
  for (const auto& [name, value] : feeds) FeedTensor(im.main.blocks(0), scope, im.var_of.at(name), value);
  exec.RunProgram(im.main, scope);
  Tensor out;
  out.CopyFrom(scope.GetVar(im.outputs[0])->Get());
  return out;
}

// Max(a [3,1], b [4], c [1]): a and b both broadcast, so a is expanded to
// [3,4] first; then c broadcasts into the running maximum.
TEST(OnnxConvertersTest, MaxChainsItsInputsAndBroadcastsThemAll) {
  OnnxModelBuilder m(13);
  m.Input("a", {3, 1}).Input("b", {4}).Input("c", {1});
  m.Node("Max", {"a", "b", "c"}, {"y"});
  m.Output("y", {3, 4});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  EXPECT_EQ(OpTypes(im), (std::vector<std::string>{"expand_v2", "elementwise_max", "elementwise_max"}));
  const float nan = std::nanf("");
  const Tensor y = RunImported(im, {{"a", test::FloatTensor({3, 1}, {-1, 2, nan})},
                            {"b", test::FloatTensor({4}, {0, 1, 3, -5})},
                            {"c", test::FloatTensor({1}, {0.5f})}});
  EXPECT_EQ(test::CompareTensors(y, test::FloatTensor({3, 4}, {0.5f, 1, 3, 0.5f, 2, 2, 3, 2, nan, nan, nan, nan}), 0, 0),
            "");
}

TEST(OnnxConvertersTest, OneInputMaxIsItsInputAndMinOfTwoIsOneOp) {
  OnnxModelBuilder m(13);
  m.Input("a", {2}).Input("b", {2});
  m.Node("Max", {"a"}, {"m"});
  m.Node("Min", {"m", "b"}, {"y"});
  m.Output("y", {2});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  EXPECT_EQ(OpTypes(im), (std::vector<std::string>{"elementwise_min"}));
  EXPECT_EQ(InputArgs(im.main.blocks(0).ops(0), "X"), std::vector<std::string>{"a"});
}

// ONNX lists every begin, then every end: pads [0,1, 2,3] of a [2,2] input
// are kiln's paddings [0,2, 1,3].
TEST(OnnxConvertersTest, PadReordersPadsIntoPairsAndKeepsItsValue) {
  OnnxModelBuilder m(13);
  m.Input("x", {2, 2}).Ints("pads", {4}, {0, 1, 2, 3}).Floats("value", {}, {1.5f});
  m.Node("Pad", {"x", "pads", "value"}, {"y"});
  m.Output("y", {4, 6});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  ASSERT_EQ(OpTypes(im), std::vector<std::string>{"pad"});
  EXPECT_EQ(std::get<std::vector<int64_t>>(AttrOf(im, 0, "paddings")), (std::vector<int64_t>{0, 2, 1, 3}));
  const Tensor y = RunImported(im, {{"x", test::FloatTensor({2, 2}, {1, 2, 3, 4})}});
  const float p = 1.5f;
  EXPECT_EQ(test::CompareTensors(y, test::FloatTensor({4, 6}, {p, 1, 2, p, p, p, p, 3, 4, p, p, p,  //
                                                               p, p, p, p, p, p, p, p, p, p, p, p}),
                                 0, 0),
            "");
}

// ONNX's attribute names and defaults become kiln's.
TEST(OnnxConvertersTest, ActivationAttributesAreRenamed) {
  OnnxModelBuilder m(14);
  m.Input("x", {3});
  m.Node("Selu", {"x"}, {"a"});
  auto& hs = m.Node("HardSigmoid", {"a"}, {"b"});
  AttrFloat(hs, "alpha", 0.25f);
  AttrFloat(hs, "beta", 0.75f);
  AttrFloat(m.Node("ThresholdedRelu", {"b"}, {"c"}), "alpha", 2.0f);
  m.Node("HardSwish", {"c"}, {"d"});
  AttrInt(m.Node("IsInf", {"d"}, {"y"}), "detect_negative", 0);
  m.Output("y", {3}, onnx::TensorProto::BOOL);
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  ASSERT_EQ(OpTypes(im),
            (std::vector<std::string>{"selu", "hard_sigmoid", "thresholded_relu", "hard_swish", "isinf"}));
  EXPECT_EQ(std::get<float>(AttrOf(im, 0, "alpha")), 1.67326319217681884765625f);
  EXPECT_EQ(std::get<float>(AttrOf(im, 0, "scale")), 1.05070102214813232421875f);
  EXPECT_EQ(std::get<float>(AttrOf(im, 1, "slope")), 0.25f);
  EXPECT_EQ(std::get<float>(AttrOf(im, 1, "offset")), 0.75f);
  EXPECT_EQ(std::get<float>(AttrOf(im, 2, "threshold")), 2.0f);
  EXPECT_EQ(std::get<float>(AttrOf(im, 3, "offset")), 3.0f);
  EXPECT_TRUE(std::get<bool>(AttrOf(im, 4, "detect_positive")));
  EXPECT_FALSE(std::get<bool>(AttrOf(im, 4, "detect_negative")));
}

// Pow's exponent known at import and one value is pow's factor; otherwise
// elementwise_pow, with the exponent broadcast into the base.
TEST(OnnxConvertersTest, PowTakesAFactorOrATensorExponent) {
  OnnxModelBuilder m(15);
  m.Input("x", {2, 3}).Input("e", {3}).Floats("three", {}, {3});
  m.Node("Pow", {"x", "three"}, {"cube"});
  m.Node("Pow", {"cube", "e"}, {"y"});
  m.Output("y", {2, 3});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  EXPECT_EQ(OpTypes(im), (std::vector<std::string>{"pow", "elementwise_pow"}));
  EXPECT_EQ(std::get<float>(AttrOf(im, 0, "factor")), 3.0f);
}

// Token ids [2, 2] computed at run time pick rows of a [3, 2] table; a
// negative id counts from the end, as ONNX Gather says.
TEST(OnnxConvertersTest, GatherTakesRunTimeIndicesCountingNegativeOnesFromTheEnd) {
  OnnxModelBuilder m(13);
  m.Input("ids", {2, 2}, onnx::TensorProto::INT64).Floats("table", {3, 2}, {0, 1, 10, 11, 20, 21});
  m.Node("Gather", {"table", "ids"}, {"y"});
  m.Output("y", {2, 2, 2});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  EXPECT_EQ(OpTypes(im), (std::vector<std::string>{"reshape2", "gather", "reshape2"}));
  const Tensor y = RunImported(im, {{"ids", test::Int64Tensor({2, 2}, {-1, 0, 2, -3})}});
  EXPECT_EQ(test::CompareTensors(y, test::FloatTensor({2, 2, 2}, {20, 21, 0, 1, 20, 21, 0, 1}), 0, 0), "");
}

TEST(OnnxConvertersTest, GatherElementsIsTakeAlongAxis) {
  OnnxModelBuilder m(13);
  m.Input("x", {2, 3}).Input("idx", {2, 2}, onnx::TensorProto::INT64);
  AttrInt(m.Node("GatherElements", {"x", "idx"}, {"y"}), "axis", -1);
  m.Output("y", {2, 2});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  ASSERT_EQ(OpTypes(im), std::vector<std::string>{"take_along_axis"});
  EXPECT_EQ(std::get<int64_t>(AttrOf(im, 0, "Axis")), 1);
  const Tensor y = RunImported(im, {{"x", test::FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6})},
                                    {"idx", test::Int64Tensor({2, 2}, {2, -3, -1, 1})}});
  EXPECT_EQ(test::CompareTensors(y, test::FloatTensor({2, 2}, {3, 1, 6, 5}), 0, 0), "");
}

// log_prob is the log_softmax along dim 1 that nll_loss reads; without
// ignore_index no label is ignored.
TEST(OnnxConvertersTest, SoftmaxCrossEntropyLossIsLogSoftmaxThenNllLoss) {
  OnnxModelBuilder m(13);
  m.Input("scores", {2, 3}).Input("labels", {2}, onnx::TensorProto::INT64);
  m.Node("SoftmaxCrossEntropyLoss", {"scores", "labels"}, {"loss", "log_prob"});
  m.Output("loss", {}).Output("log_prob", {2, 3});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  ASSERT_EQ(OpTypes(im), (std::vector<std::string>{"log_softmax", "nll_loss"}));
  EXPECT_EQ(std::get<int64_t>(AttrOf(im, 0, "axis")), 1);
  EXPECT_EQ(InputArgs(im.main.blocks(0).ops(1), "X"), std::vector<std::string>{im.var_of.at("log_prob")});
  EXPECT_EQ(std::get<std::string>(AttrOf(im, 1, "reduction")), "mean");
  EXPECT_EQ(std::get<int64_t>(AttrOf(im, 1, "ignore_index")), std::numeric_limits<int64_t>::min());
  // Row 0 is uniform: -log(1/3); row 1's label 0: logsumexp(1, 2, 3) - 1.
  const Tensor loss = RunImported(im, {{"scores", test::FloatTensor({2, 3}, {0, 0, 0, 1, 2, 3})},
                                       {"labels", test::Int64Tensor({2}, {2, 0})}});
  const double row1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1;
  EXPECT_EQ(test::CompareTensors(loss, test::FloatTensor({}, {static_cast<float>((std::log(3.0) + row1) / 2)}), 1e-6,
                                 1e-6),
            "");
}

struct Refusal {
  std::string what;
  OnnxModelBuilder model;
  std::string message;
};

// masked_fill as exported: Where(mask [1,4], a scalar, x [3,4]). kiln's
// where takes one shape, so the mask and the scalar are expanded to [3,4].
TEST(OnnxConvertersTest, WhereBroadcastsItsThreeInputs) {
  OnnxModelBuilder m(14);
  m.Input("c", {1, 4}).Input("x", {3, 4}).Floats("zero", {}, {0}).Floats("fill", {}, {-9});
  m.Node("Greater", {"c", "zero"}, {"mask"});
  m.Node("Where", {"mask", "fill", "x"}, {"y"});
  m.Output("y", {3, 4});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  EXPECT_EQ(OpTypes(im), (std::vector<std::string>{"greater_than", "expand_v2", "expand_v2", "where"}));
  const Tensor y = RunImported(im, {{"c", test::FloatTensor({1, 4}, {1, -1, 0, 2})},
                                    {"x", test::FloatTensor({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})}});
  EXPECT_EQ(test::CompareTensors(y, test::FloatTensor({3, 4}, {-9, 2, 3, -9, -9, 6, 7, -9, -9, 10, 11, -9}), 0, 0),
            "");
}

// The exporter computes a head size as Shape / heads: integer Div of
// constants folds at import (kiln's elementwise_div takes floats only).
TEST(OnnxConvertersTest, IntegerDivOfConstantsFolds) {
  OnnxModelBuilder m(14);
  m.Input("x", {4, 6}).Ints("two", {1}, {2}).Ints("scale", {2}, {1, 4});
  m.Node("Shape", {"x"}, {"s"});
  m.Node("Div", {"s", "two"}, {"h"});  // [2, 3]
  m.Node("Mul", {"h", "scale"}, {"shape"});  // [2, 12]
  m.Node("Reshape", {"x", "shape"}, {"y"});
  m.Output("y", {2, 12});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  ASSERT_EQ(OpTypes(im), std::vector<std::string>{"reshape2"});
  EXPECT_EQ(std::get<std::vector<int64_t>>(AttrOf(im, 0, "shape")), (std::vector<int64_t>{2, 12}));
}

// Operands kiln cannot take: their dtypes, values only known at run time,
// a run-time broadcast, a constant division by zero.
std::vector<Refusal> OperandRefusals() {
  std::vector<Refusal> out;
  {
    OnnxModelBuilder m(13);
    m.Input("x", {3}).Input("y", {3});
    m.Node("Mod", {"x", "y"}, {"z"}, "mod");
    m.Output("z", {3});
    out.push_back({"a float Mod without fmod", m,
                   "node 0 'mod' (Mod, opset 13): fmod = 0 with f32 operands: ONNX requires fmod = 1 for floats"});
  }
  {
    OnnxModelBuilder m(15);
    m.Input("x", {3}).Input("e", {3}, onnx::TensorProto::INT64);
    m.Node("Pow", {"x", "e"}, {"z"}, "pow");
    m.Output("z", {3});
    out.push_back({"Pow of mixed dtypes", m,
                   "node 0 'pow' (Pow, opset 15): the base is f32, the exponent i64; kiln's elementwise_pow takes one "
                   "dtype for both"});
  }
  {
    OnnxModelBuilder m(13);
    m.Input("x", {2, 3}).Input("repeats", {2}, onnx::TensorProto::INT64);
    m.Node("Tile", {"x", "repeats"}, {"z"}, "tile");
    m.Output("z", {-1, -1});
    out.push_back({"run-time repeats", m,
                   "node 0 'tile' (Tile, opset 13): repeats (input 1 'repeats') is computed at run time; kiln needs "
                   "it known at import"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("a", {1, 4}).Input("b", {-1, 1});
    m.Node("Add", {"a", "b"}, {"y"}, "add");
    m.Output("y", {-1, 4});
    out.push_back({"a broadcast dim from the second operand at run time", m,
                   "node 0 'add' (Add, opset 14): broadcast: both operands broadcast ([1,4] and [-1,1] to [-1,4]), "
                   "and dim 0 comes from the second operand at run time"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("x", {2, 3}).Ints("a", {2}, {6, -7}).Ints("b", {2}, {2, 0});
    m.Node("Div", {"a", "b"}, {"shape"}, "div");
    m.Node("Reshape", {"x", "shape"}, {"y"});
    m.Output("y", {-1, -1});
    out.push_back({"integer division by zero", m,
                   "node 0 'div' (Div, opset 14): integer division by zero (element 1 of the output)"});
  }
  return out;
}

// Attributes and constant inputs known at import that are out of kiln's range.
std::vector<Refusal> AttributeRefusals() {
  std::vector<Refusal> out;
  {
    OnnxModelBuilder m(13);
    m.Input("x", {2, 3}).Ints("shape", {2}, {-1, 3});
    m.Node("Expand", {"x", "shape"}, {"z"}, "expand");
    m.Output("z", {2, 3});
    out.push_back({"a negative Expand shape", m,
                   "node 0 'expand' (Expand, opset 13): the shape [-1,3]: expected values >= 0"});
  }
  {
    OnnxModelBuilder m(13);
    m.Input("x", {2, 3}).Ints("pads", {2}, {1, 1});
    m.Node("Pad", {"x", "pads"}, {"z"}, "pad");
    m.Output("z", {-1, -1});
    out.push_back({"pads of the wrong length", m,
                   "node 0 'pad' (Pad, opset 13): pads [1,1] has 2 values for input rank 2 (expected 4)"});
  }
  {
    OnnxModelBuilder m(13);
    m.Input("x", {2, 3}).Ints("pads", {4}, {0, 0, 0, 0});
    auto& pad = m.Node("Pad", {"x", "pads"}, {"z"}, "pad");
    auto* a = pad.add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("wrap");
    m.Output("z", {2, 3});
    out.push_back({"a Pad mode kiln lacks", m,
                   "node 0 'pad' (Pad, opset 13): mode 'wrap': expected constant, reflect or edge"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("x", {2, 3}).Ints("axis", {}, {2});
    m.Node("CumSum", {"x", "axis"}, {"z"}, "cumsum");
    m.Output("z", {2, 3});
    out.push_back({"a CumSum axis out of range", m, "node 0 'cumsum' (CumSum, opset 14): axis 2 is out of range for rank 2"});
  }
  {
    OnnxModelBuilder m(13);
    m.Input("x", {3, 2}).Ints("idx", {2}, {0, -4});
    m.Node("Gather", {"x", "idx"}, {"z"}, "gather");
    m.Output("z", {2, 2});
    out.push_back({"a Gather index known at import out of range", m,
                   "node 0 'gather' (Gather, opset 13): index -4 is out of range for dim 3"});
  }
  {
    OnnxModelBuilder m(13);
    m.Input("x", {2, 3}).Input("t", {2}, onnx::TensorProto::INT64);
    auto& nll = m.Node("NegativeLogLikelihoodLoss", {"x", "t"}, {"z"}, "nll");
    auto* a = nll.add_attribute();
    a->set_name("reduction");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("max");
    m.Output("z", {});
    out.push_back({"a reduction kiln lacks", m,
                   "node 0 'nll' (NegativeLogLikelihoodLoss, opset 13): reduction 'max': expected none, sum or mean"});
  }
  return out;
}

std::vector<Refusal> Refusals() {
  std::vector<Refusal> out = OperandRefusals();
  for (Refusal& r : AttributeRefusals()) out.push_back(std::move(r));
  return out;
}

TEST(OnnxConvertersTest, RefusalsSayWhy) {
  for (const Refusal& r : Refusals()) {
    const std::string e = ImportError(r.model);
    EXPECT_NE(e.find("m.onnx: " + r.message), std::string::npos) << r.what << ":\n" << e;
  }
}

// A run-time input the converter needs known names itself, so a caller can
// bind it (OnnxImportOptions::input_values) and import again.
TEST(OnnxConvertersTest, ARunTimeRepeatsInputCanBeBound) {
  const OnnxModelBuilder m = Refusals()[2].model;
  try {
    ImportOnnxModelFromBytes(m.Bytes());
    FAIL() << "imported";
  } catch (const OnnxImportError& e) {
    ASSERT_TRUE(e.refusal().has_value());
    EXPECT_EQ(e.refusal()->needs_constant, "repeats");
  }
  OnnxImportOptions options;
  options.input_values["repeats"] = test::Int64Tensor({2}, {2, 1});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes(), options);
  ASSERT_EQ(OpTypes(im), std::vector<std::string>{"tile"});
  EXPECT_EQ(std::get<std::vector<int64_t>>(AttrOf(im, 0, "repeat_times")), (std::vector<int64_t>{2, 1}));
}

}  // namespace
}  // namespace kiln
