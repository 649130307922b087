// The ONNX importer (framework/onnx/) on models built here: the golden
// program of a small CNN (conv, training-mode BatchNorm, pooling, Gemm, a
// folded constant), constant folding through kiln's kernels, BatchNorm's
// running statistics as state vars updated in place, input shapes and
// bound inputs, and the refusals: an op kiln lacks, an attribute value, a
// broadcast, a dtype, another domain, a corrupt model, a checker error.
// External data: tests/onnx_external_data_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "framework/executor.h"
#include "framework/ir/graph.h"
#include "framework/onnx/onnx_import.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "tests/golden_util.h"
#include "tests/onnx_model_builder.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::AttrInt;
using test::AttrInt64Tensor;
using test::AttrInts;
using test::OnnxModelBuilder;

// The message of the kiln::Error importing `m` throws ("(no error)" if none).
std::string ImportError(const OnnxModelBuilder& m, const OnnxImportOptions& options = {}) {
  return test::ErrorOf([&] { ImportOnnxModelFromBytes(m.Bytes(), options, "m.onnx"); });
}

std::vector<float> Values(int n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7) % 11 - 5);
  return v;
}

// x [N,3,8,8] -> Conv(3x3, pad 1) -> BatchNormalization (training) -> Relu ->
// MaxPool(2) -> Flatten -> Gemm -> Mul by a Constant -> logits [N,10].
OnnxModelBuilder SmallCnn() {
  OnnxModelBuilder m(14, "small_cnn");
  m.Input("x", {-1, 3, 8, 8});
  m.Floats("conv.weight", {4, 3, 3, 3}, Values(108, 0.1f)).Floats("conv.bias", {4}, {0.1f, -0.2f, 0.3f, 0});
  m.Floats("bn.weight", {4}, {1, 1.5f, 0.5f, 2}).Floats("bn.bias", {4}, {0, 0.1f, 0.2f, 0.3f});
  m.Floats("bn.running_mean", {4}, {0, 0, 0, 0}).Floats("bn.running_var", {4}, {1, 1, 1, 1});
  m.Floats("fc.weight", {10, 64}, Values(640, 0.01f)).Floats("fc.bias", {10}, Values(10, 0.1f));
  auto& conv = m.Node("Conv", {"x", "conv.weight", "conv.bias"}, {"c"});
  AttrInts(conv, "pads", {1, 1, 1, 1});
  auto& bn = m.Node("BatchNormalization", {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
                    {"b", "bn_mean_out", "bn_var_out"});
  AttrInt(bn, "training_mode", 1);
  m.Node("Relu", {"b"}, {"r"});
  auto& pool = m.Node("MaxPool", {"r"}, {"p"});
  AttrInts(pool, "kernel_shape", {2, 2});
  AttrInts(pool, "strides", {2, 2});
  m.Node("Flatten", {"p"}, {"f"});
  auto& gemm = m.Node("Gemm", {"f", "fc.weight", "fc.bias"}, {"g"});
  AttrInt(gemm, "transB", 1);
  auto& two = m.Node("Constant", {}, {"two"});
  auto* a = two.add_attribute();
  a->set_name("value_float");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(2.0f);
  m.Node("Mul", {"g", "two"}, {"logits"});
  m.Output("logits", {-1, 10});
  return m;
}

std::string VarLine(const proto::VarDesc& v) {
  return StrCat(v.name(), " : ", DataTypeName(FromProto(v.dtype())), DimsToString(VarDims(v)),
                v.persistable() ? " persistable" : "", v.stop_gradient() ? " stop_gradient" : "", "\n");
}

TEST(OnnxImportTest, SmallCnnGolden) {
  const OnnxImport im = ImportOnnxModelFromBytes(SmallCnn().Bytes(), {}, "small_cnn.onnx");
  std::string t = "# small_cnn: the ONNX importer's program (regenerate with KILN_UPDATE_GOLDEN=1)\n## main\n";
  t += ir::Graph::FromBlock(im.main.blocks(0)).Print();
  t += "## vars\n";
  for (const auto& v : im.main.blocks(0).vars()) t += VarLine(v);
  t += "## startup\n";
  for (const auto& op : im.startup.blocks(0).ops()) {
    const Attribute shape = AttrFromProto(*FindAttr(op, "shape"));
    t += StrCat(op.type(), " -> ", OutputArgs(op, "Out")[0], " ", AttrToString(shape), "\n");
  }
  t += "## inputs " + StrCat(im.inputs.size()) + ": " + im.inputs[0] + "; outputs: " + im.outputs[0] + "\n";
  test::ExpectGolden("tests/golden/onnx_import/small_cnn.golden", t);
}

TEST(OnnxImportTest, ParametersAndRunningStatistics) {
  const OnnxImport im = ImportOnnxModelFromBytes(SmallCnn().Bytes(), {}, "small_cnn.onnx");
  EXPECT_EQ(im.opset, 14);
  EXPECT_EQ(im.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(im.outputs, std::vector<std::string>{"logits"});
  std::vector<std::string> params = im.parameters, state = im.state;
  std::sort(params.begin(), params.end());
  std::sort(state.begin(), state.end());
  EXPECT_EQ(params, (std::vector<std::string>{"bn.bias", "bn.weight", "conv.bias", "conv.weight", "fc.bias",
                                              "fc.weight"}));
  EXPECT_EQ(state, (std::vector<std::string>{"bn.running_mean", "bn.running_var"}));
  const proto::BlockDesc& b = im.main.blocks(0);
  EXPECT_FALSE(FindVarDesc(b, "conv.weight")->stop_gradient());
  EXPECT_TRUE(FindVarDesc(b, "bn.running_mean")->stop_gradient());
  EXPECT_TRUE(FindVarDesc(b, "bn.running_mean")->persistable());
  for (const auto& op : b.ops()) {
    if (op.type() != "batch_norm") continue;
    EXPECT_EQ(OutputArgs(op, "MeanOut"), InputArgs(op, "Mean"));
    EXPECT_EQ(OutputArgs(op, "VarianceOut"), InputArgs(op, "Variance"));
    EXPECT_FALSE(std::get<bool>(AttrFromProto(*FindAttr(op, "is_test"))));
  }

  // One step: the running mean becomes 0.9 * 0 + 0.1 * the batch mean of the
  // conv output, in the same var.
  Scope scope;
  Executor exec;
  exec.RunProgram(im.startup, scope);
  std::mt19937 rng(5);
  FeedTensor(b, scope, "x", test::RandomTensor({2, 3, 8, 8}, DataType::kFP32, rng));
  auto plan = exec.Prepare(im.main, 0, {"logits", "c"});
  exec.Run(*plan, scope);
  const Tensor& c = scope.GetVar("c")->Get();  // the conv output, with its bias
  const Tensor& mean = scope.GetVar("bn.running_mean")->Get();
  ASSERT_EQ(c.dims(), (Dims{2, 4, 8, 8}));
  for (int ch = 0; ch < 4; ++ch) {
    double sum = 0;
    for (int n = 0; n < 2; ++n) {
      for (int i = 0; i < 64; ++i) sum += c.data<float>()[(n * 4 + ch) * 64 + i];
    }
    EXPECT_NEAR(mean.data<float>()[ch], 0.1 * sum / 128, 1e-5) << ch;
  }
  EXPECT_EQ(scope.GetVar("logits")->Get().dims(), (Dims{2, 10}));
}

// Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds into one reshape2
// with a constant shape; Range, Cast, Equal, ConstantOfShape and Where fold
// into one constant operand.
TEST(OnnxImportTest, ConstantSubgraphsFold) {
  OnnxModelBuilder m(13);
  m.Input("x", {2, 3, 4}).Input("z", {3, 4});
  m.Ints("zero", {}, {0}).Ints("minus_one", {1}, {-1}).Ints("axes0", {1}, {0});
  m.Node("Shape", {"x"}, {"shape"});
  m.Node("Gather", {"shape", "zero"}, {"batch"});
  m.Node("Unsqueeze", {"batch", "axes0"}, {"batch1"});
  auto& concat = m.Node("Concat", {"batch1", "minus_one"}, {"new_shape"});
  AttrInt(concat, "axis", 0);
  m.Node("Reshape", {"x", "new_shape"}, {"y"});
  m.Ints("start", {}, {0}).Ints("limit", {}, {4}).Ints("delta", {}, {1}).Ints("two", {}, {2}).Ints("four", {1}, {4});
  m.Node("Range", {"start", "limit", "delta"}, {"r"});
  AttrInt(m.Node("Cast", {"r"}, {"rf"}), "to", onnx::TensorProto::FLOAT);
  m.Node("Equal", {"r", "two"}, {"is_two"});
  m.Node("ConstantOfShape", {"four"}, {"zeros"});
  m.Node("Where", {"is_two", "rf", "zeros"}, {"w"});
  m.Node("Add", {"z", "w"}, {"v"});
  m.Output("y", {2, 12}).Output("v", {3, 4});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  const proto::BlockDesc& b = im.main.blocks(0);
  ASSERT_EQ(b.ops_size(), 2) << ProgramToText(im.main);
  EXPECT_EQ(b.ops(0).type(), "reshape2");
  EXPECT_EQ(std::get<std::vector<int64_t>>(AttrFromProto(*FindAttr(b.ops(0), "shape"))),
            (std::vector<int64_t>{2, -1}));
  EXPECT_EQ(b.ops(1).type(), "elementwise_add");
  // The folded operand is a constant var the startup program fills.
  const std::string w = InputArgs(b.ops(1), "Y")[0];
  EXPECT_TRUE(FindVarDesc(b, w)->persistable());
  EXPECT_TRUE(FindVarDesc(b, w)->stop_gradient());
  EXPECT_TRUE(im.parameters.empty());
  Scope scope;
  Executor().RunProgram(im.startup, scope);
  EXPECT_EQ(test::CompareTensors(scope.GetVar(w)->Get(), test::FloatTensor({4}, {0, 0, 2, 0}), 0, 0), "");
}

// OneHot with indices known at import: negative ones count from the end,
// out-of-range ones give a row of zeros (kiln's one_hot, run at import).
TEST(OnnxImportTest, OneHotOfKnownIndices) {
  OnnxModelBuilder m(11);
  m.Input("x", {3, 3});
  m.Ints("idx", {3}, {-1, 0, 5}).Ints("depth", {}, {3}).Floats("values", {2}, {0, 1});
  m.Node("OneHot", {"idx", "depth", "values"}, {"oh"});
  m.Node("Add", {"x", "oh"}, {"y"});
  m.Output("y", {3, 3});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  ASSERT_EQ(im.main.blocks(0).ops_size(), 2);
  EXPECT_EQ(im.main.blocks(0).ops(0).type(), "one_hot");
  Scope scope;
  Executor exec;
  exec.RunProgram(im.startup, scope);
  FeedTensor(im.main.blocks(0), scope, "x", test::FloatTensor({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0}));
  exec.RunProgram(im.main, scope);
  EXPECT_EQ(test::CompareTensors(scope.GetVar("y")->Get(), test::FloatTensor({3, 3}, {0, 0, 1, 1, 0, 0, 0, 0, 0}), 0, 0),
            "");
}

// A causal mask: Trilu (lower) of ones, computed at import.
TEST(OnnxImportTest, TriluMaskFolds) {
  OnnxModelBuilder m(14);
  m.Input("x", {3, 3});
  m.Ints("shape", {2}, {3, 3});
  auto& ones = m.Node("ConstantOfShape", {"shape"}, {"ones"});
  auto* v = ones.add_attribute();
  v->set_name("value");
  v->set_type(onnx::AttributeProto::TENSOR);
  v->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  v->mutable_t()->add_dims(1);
  v->mutable_t()->add_float_data(1.0f);
  AttrInt(m.Node("Trilu", {"ones"}, {"mask"}), "upper", 0);
  m.Node("Mul", {"x", "mask"}, {"y"});
  m.Output("y", {3, 3});
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes());
  ASSERT_EQ(im.main.blocks(0).ops_size(), 1);
  Scope scope;
  Executor().RunProgram(im.startup, scope);
  const std::string mask = InputArgs(im.main.blocks(0).ops(0), "Y")[0];
  EXPECT_EQ(test::CompareTensors(scope.GetVar(mask)->Get(), test::FloatTensor({3, 3}, {1, 0, 0, 1, 1, 0, 1, 1, 1}), 0, 0),
            "");
}

TEST(OnnxImportTest, InputShapesAndBoundInputs) {
  OnnxModelBuilder m(14);
  m.Input("x", {-1, 6}).Input("shape", {2}, onnx::TensorProto::INT64);
  m.Node("Reshape", {"x", "shape"}, {"y"});
  m.Output("y", {-1, -1});
  // The shape is a graph input: refused, naming it, until it is bound.
  const std::string refused = ImportError(m);
  EXPECT_NE(refused.find("m.onnx: node 0 'Reshape_0' (Reshape, opset 14): the shape (input 1 'shape') is computed at "
                         "run time; kiln needs it known at import"),
            std::string::npos)
      << refused;
  OnnxImportOptions options;
  options.input_values["shape"] = test::Int64Tensor({2}, {-1, 3});
  OnnxImport im = ImportOnnxModelFromBytes(m.Bytes(), options);
  EXPECT_EQ(im.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(VarDims(*FindVarDesc(im.main.blocks(0), "x")), (Dims{-1, 6}));  // dim_param "N" is -1
  EXPECT_EQ(VarDims(*FindVarDesc(im.main.blocks(0), "y")), (Dims{-1, 3}));
  options.input_shapes["x"] = {4, 6};
  im = ImportOnnxModelFromBytes(m.Bytes(), options);
  EXPECT_EQ(VarDims(*FindVarDesc(im.main.blocks(0), "y")), (Dims{8, 3}));
  options.input_shapes["nope"] = {1};
  EXPECT_NE(ImportError(m, options).find("input shape given for 'nope', which is not a graph input"),
            std::string::npos);
  options.input_shapes.erase("nope");
  options.input_values["shape"] = test::FloatTensor({2}, {-1, 3});
  EXPECT_NE(ImportError(m, options).find("the value bound to input 'shape' is f32, the model's input i64"),
            std::string::npos);
}

// A model exported at batch 2 imported at batch 5: ONNX's shape inference
// runs with the dims kiln used, not the ones the file recorded.
TEST(OnnxImportTest, InputShapesOverrideTheModels) {
  OnnxModelBuilder m(14);
  m.Input("x", {2, 6}).Floats("w", {6, 3}, Values(18, 0.5f));
  m.Node("MatMul", {"x", "w"}, {"h"});
  m.Node("Relu", {"h"}, {"y"});
  m.Output("y", {2, 3});
  OnnxImportOptions options;
  options.input_shapes["x"] = {5, 6};
  const OnnxImport im = ImportOnnxModelFromBytes(m.Bytes(), options);
  EXPECT_EQ(VarDims(*FindVarDesc(im.main.blocks(0), "y")), (Dims{5, 3}));
  options.input_shapes["x"] = {-1, 6};
  EXPECT_EQ(VarDims(*FindVarDesc(ImportOnnxModelFromBytes(m.Bytes(), options).main.blocks(0), "h")), (Dims{-1, 3}));
}

struct RefusalCase {
  std::string what;
  OnnxModelBuilder model;
  std::string message;
};

std::vector<RefusalCase> RefusalCases() {
  std::vector<RefusalCase> cases;
  {
    OnnxModelBuilder m(14);
    m.Input("x", {2, 3});
    m.Node("Relu", {"x"}, {"r"});
    m.Node("Hardmax", {"r"}, {"y"}, "head/Hardmax");
    m.Output("y", {2, 3});
    cases.push_back({"an op kiln lacks", m,
                     "m.onnx: node 1 'head/Hardmax' (Hardmax, opset 14): no kiln activation op for it"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("x", {1, 3, 8, 8}).Floats("w", {2, 3, 3, 3}, Values(54, 0.1f));
    AttrInts(m.Node("Conv", {"x", "w"}, {"y"}, "conv"), "pads", {0, 0, 1, 1});
    m.Output("y", {1, 2, 7, 7});
    cases.push_back({"an attribute value", m,
                     "m.onnx: node 0 'conv' (Conv, opset 14): pads begin [0,0] and end [1,1] differ; kiln pads both "
                     "sides of a dim alike"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("x", {3, 5});
    AttrInt(m.Node("ArgMax", {"x"}, {"y"}, "am"), "select_last_index", 1);
    m.Output("y", {1, 5}, onnx::TensorProto::INT64);
    cases.push_back({"another attribute value", m,
                     "node 0 'am' (ArgMax, opset 14): attribute select_last_index = 1: kiln's arg ops give the first "
                     "index of ties"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("a", {3, 4}).Input("b", {4, 4});
    m.Node("Add", {"a", "b"}, {"y"}, "add");
    m.Output("y", {3, 4});
    cases.push_back({"a broadcast", m, "node 0 'add' (Add, opset 14): operands [3,4] and [4,4] do not broadcast"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("x", {2});
    AttrInt(m.Node("Cast", {"x"}, {"y"}, "half"), "to", onnx::TensorProto::FLOAT16);
    m.Output("y", {2}, onnx::TensorProto::FLOAT16);
    cases.push_back({"a dtype", m, "node 0 'half' (Cast, opset 14): attribute to = float16: kiln has no such dtype"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("x", {2}, onnx::TensorProto::UINT8);
    m.Node("Identity", {"x"}, {"y"});
    m.Output("y", {2}, onnx::TensorProto::UINT8);
    cases.push_back({"an input dtype", m, "m.onnx: graph input 'x' is uint8 (kiln has float, double, int64, int32 and bool tensors)"});
  }
  {
    OnnxModelBuilder m(14);
    auto* o = m.model().add_opset_import();
    o->set_domain("com.example");
    o->set_version(1);
    m.Input("x", {2});
    m.Node("Frobnicate", {"x"}, {"y"}, "frob").set_domain("com.example");
    m.Output("y", {2});
    cases.push_back({"another domain", m,
                     "node 0 'frob' (Frobnicate, opset 14): domain 'com.example': kiln imports the ONNX domain only"});
  }
  {
    OnnxModelBuilder m(14);
    m.Input("x", {2});
    m.Node("Relu", {"nowhere"}, {"y"});
    m.Output("y", {2});
    cases.push_back({"a checker error", m, "m.onnx: the ONNX checker rejects the model: "});
  }
  return cases;
}

TEST(OnnxImportTest, RefusalsNameTheNodeOpOpsetAndWhy) {
  for (const RefusalCase& c : RefusalCases()) {
    const std::string e = ImportError(c.model);
    EXPECT_NE(e.find(c.message), std::string::npos) << c.what << ":\n" << e;
  }
  // The structured refusal, for tools.
  try {
    ImportOnnxModelFromBytes(RefusalCases()[0].model.Bytes(), {}, "m.onnx");
    FAIL() << "imported";
  } catch (const OnnxImportError& e) {
    ASSERT_TRUE(e.refusal().has_value());
    EXPECT_EQ(e.refusal()->node_index, 1);
    EXPECT_EQ(e.refusal()->node_name, "head/Hardmax");
    EXPECT_EQ(e.refusal()->op_type, "Hardmax");
    EXPECT_EQ(e.refusal()->opset, 14);
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  }
}

TEST(OnnxImportTest, BadBytesAreErrorsNamingTheSource) {
  EXPECT_NE(test::ErrorOf([] { ImportOnnxModelFromBytes("not a model", {}, "junk.onnx"); })
                .find("junk.onnx: not an ONNX model"),
            std::string::npos);
  EXPECT_NE(test::ErrorOf([] { ImportOnnxModel("/nonexistent/m.onnx"); }).find("/nonexistent/m.onnx"),
            std::string::npos);
}

// The importer's table names every op type it knows, with opsets or why not.
TEST(OnnxImportTest, OpTableSaysWhatIsMissing) {
  bool conv = false, hardmax = false;
  for (const OnnxOpSupport& s : OnnxOpTable()) {
    if (s.op_type == "Conv") conv = s.since == 1 && s.until == 17 && s.missing.empty();
    if (s.op_type == "Hardmax") hardmax = s.since == 0 && !s.missing.empty();
  }
  EXPECT_TRUE(conv);
  EXPECT_TRUE(hardmax);
}

}  // namespace
}  // namespace kiln
