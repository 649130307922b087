// The ONNX exporter (framework/onnx/onnx_export.h), op by op: a small kiln
// program exported, read back by the importer and run computes what the
// program computes (onnx::checker and strict shape inference run inside the
// export); ops and attributes without an ONNX form are refused naming the op
// and its var.
#include <gtest/gtest.h>

#include <random>

#include "framework/executor.h"
#include "framework/onnx/onnx_export.h"
#include "framework/onnx/onnx_import.h"
#include "framework/op_desc.h"
#include "framework/program_builder.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

// Runs the builder's program and, exported and re-imported, the ONNX model
// on the same feeds; returns "" when `out` agrees within 1e-5 (relative to
// its largest magnitude), else what differs.
std::string RoundTrip(ProgramBuilder& b, const std::map<std::string, Tensor>& feeds, const std::string& out) {
  Executor exec;
  Scope scope;
  exec.RunProgram(b.startup(), scope);
  std::vector<std::string> feed_names;
  for (const auto& [name, t] : feeds) {
    FeedTensor(b.main().blocks(0), scope, name, t);
    feed_names.push_back(name);
  }
  auto plan = exec.Prepare(b.main(), 0, {out});
  exec.Run(*plan, scope);
  const Tensor want = scope.GetVar(out)->Get();

  const std::string bytes = ExportOnnxModelBytes(b.main(), feed_names, {out}, scope);
  const OnnxImport im = ImportOnnxModelFromBytes(bytes);
  EXPECT_EQ(im.outputs.size(), 1u);
  Scope again;
  exec.RunProgram(im.startup, again);
  for (const auto& [name, t] : feeds) FeedTensor(im.main.blocks(0), again, im.var_of.at(name), t);
  auto plan2 = exec.Prepare(im.main, 0, {im.outputs[0]});
  exec.Run(*plan2, again);
  double scale = 1e-30;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::abs(test::ValueAt(want, i)));
  return test::CompareTensors(again.GetVar(im.outputs[0])->Get(), want, 1e-5 * scale, 0);
}

Tensor Random(const Dims& dims, int seed = 1) {
  std::mt19937 rng(seed);
  return test::RandomTensor(dims, DataType::kFP32, rng, -2, 2);
}

TEST(OnnxExportTest, MatmulBatchedTransposedWithAlphaAndGemm) {
  ProgramBuilder b(1);
  const std::string x = b.Data("x", {2, 3, 4, 5});
  const std::string y = b.Param("y", {2, 3, 6, 5}, Init::Uniform(1));
  const std::string w = b.Param("w", {6, 7}, Init::Uniform(1));
  const std::string s = b.Op1("matmul", {{"X", {x}}, {"Y", {y}}}, {{"transpose_Y", true}, {"alpha", 0.5f}});
  const std::string r = b.Op1("reshape2", {{"X", {s}}}, {{"shape", std::vector<int64_t>{-1, 6}}});
  const std::string g = b.Op1("matmul", {{"X", {r}}, {"Y", {w}}}, {{"alpha", 2.0f}});
  EXPECT_EQ(RoundTrip(b, {{"x", Random({2, 3, 4, 5})}}, g), "");
}

TEST(OnnxExportTest, ElementwiseAxisBroadcastsAsPaddle) {
  ProgramBuilder b(2);
  const std::string x = b.Data("x", {-1, 3, 4, 4});
  const std::string c = b.Param("c", {3}, Init::Uniform(1));
  const std::string d = b.Param("d", {3, 4}, Init::Uniform(1));
  const std::string e = b.Param("e", {4}, Init::Uniform(1));
  std::string v = b.Op1("elementwise_add", {{"X", {x}}, {"Y", {c}}}, {{"axis", int64_t{1}}});
  v = b.Op1("elementwise_mul", {{"X", {v}}, {"Y", {d}}}, {{"axis", int64_t{1}}});
  v = b.Op1("elementwise_sub", {{"X", {v}}, {"Y", {e}}});
  v = b.Op1("elementwise_div", {{"X", {v}}, {"Y", {x}}});
  v = b.Op1("elementwise_max", {{"X", {v}}, {"Y", {e}}}, {{"axis", int64_t{3}}});
  v = b.Op1("concat", {{"X", {v, x, v}}}, {{"axis", int64_t{-2}}});
  EXPECT_EQ(RoundTrip(b, {{"x", Random({3, 3, 4, 4})}}, v), "");
}

TEST(OnnxExportTest, ActivationsAndScale) {
  for (const bool approximate : {false, true}) {
    ProgramBuilder b(3);
    std::string v = b.Data("x", {4, 6});
    v = b.Op1("gelu", {{"X", {v}}}, {{"approximate", approximate}});
    v = b.Op1("scale", {{"X", {v}}}, {{"scale", 1.5f}, {"bias", 0.25f}});
    v = b.Op1("scale", {{"X", {v}}}, {{"scale", -2.0f}, {"bias", 0.5f}, {"bias_after_scale", false}});
    v = b.Op1("tanh", {{"X", {v}}});
    v = b.Op1("sigmoid", {{"X", {v}}});
    v = b.Op1("relu", {{"X", {v}}});
    v = b.Op1("leaky_relu", {{"X", {v}}}, {{"alpha", 0.1f}});
    v = b.Op1("hard_sigmoid", {{"X", {v}}}, {{"slope", 0.3f}, {"offset", 0.4f}});
    v = b.Op1("clip", {{"X", {v}}}, {{"min", 0.45f}, {"max", 0.55f}});
    // A dropout with a seed: the exported identity reads no seed, and the
    // unused initializer is dropped (the checker would accept it; it is noise).
    const std::string seed = b.Persistable("seed", {1}, 7, DataType::kINT64);
    v = b.Op1("dropout", {{"X", {v}}, {"Seed", {seed}}}, {{"is_test", true}});
    v = b.Op1("softmax", {{"X", {v}}}, {{"axis", int64_t{0}}});
    EXPECT_EQ(RoundTrip(b, {{"x", Random({4, 6})}}, v), "") << approximate;
  }
}

TEST(OnnxExportTest, NormsInInferenceForm) {
  ProgramBuilder b(4);
  const std::string x = b.Data("x", {2, 3, 5, 5});
  const std::string w = b.Param("w", {4, 3, 3, 3}, Init::Uniform(1));
  std::string v = b.Op("conv2d", {{"Input", {x}}, {"Filter", {w}}}, {"Output"},
                       {{"strides", std::vector<int64_t>{2, 1}}, {"paddings", std::vector<int64_t>{1, 0}}})[0];
  const std::string mean = b.Param("mean", {4}, Init::Uniform(0.5f));
  const std::string var = b.Persistable("var", {4}, 2.0f);
  const std::string scale = b.Param("scale", {4}, Init::Uniform(1));
  const std::string bias = b.Param("bias", {4}, Init::Uniform(1));
  v = b.Op("batch_norm", {{"X", {v}}, {"Scale", {scale}}, {"Bias", {bias}}, {"Mean", {mean}}, {"Variance", {var}}},
           {"Y"}, {{"is_test", true}, {"epsilon", 1e-3f}})[0];
  v = b.Op1("pool2d", {{"X", {v}}},
            {{"pooling_type", std::string("avg")}, {"ksize", std::vector<int64_t>{2, 2}},
             {"paddings", std::vector<int64_t>{1, 1}}, {"exclusive", false}});
  const std::string ln_scale = b.Param("ln_scale", {4 * 4 * 4}, Init::Uniform(1));
  v = b.Op("layer_norm", {{"X", {v}}, {"Scale", {ln_scale}}}, {"Y"}, {{"begin_norm_axis", int64_t{1}}})[0];
  v = b.Op1("pool2d", {{"X", {v}}}, {{"pooling_type", std::string("max")}, {"ksize", std::vector<int64_t>{1, 1}},
                                     {"global_pooling", true}});
  v = b.Op1("dropout", {{"X", {v}}}, {{"is_test", true}, {"dropout_prob", 0.25f},
                                      {"dropout_implementation", std::string("downgrade_in_infer")}});
  v = b.Op1("reduce_mean", {{"X", {v}}}, {{"dim", std::vector<int64_t>{1, -1}}, {"keep_dim", true}});
  v = b.Op1("reduce_sum", {{"X", {v}}}, {{"dim", std::vector<int64_t>{0}}});
  EXPECT_EQ(RoundTrip(b, {{"x", Random({2, 3, 5, 5})}}, v), "");
}

TEST(OnnxExportTest, AttentionTransposeAndEmbedding) {
  ProgramBuilder b(5);
  const std::string ids = b.Data("ids", {2, 3, 1}, DataType::kINT64);
  const std::string table = b.Param("table", {10, 8}, Init::Uniform(1));
  std::string e = b.Op1("lookup_table", {{"W", {table}}, {"Ids", {ids}}});
  e = b.Op1("reshape2", {{"X", {e}}}, {{"shape", std::vector<int64_t>{0, 3, 2, 4}}});
  e = b.Op1("transpose2", {{"X", {e}}}, {{"axis", std::vector<int64_t>{0, 2, 1, 3}}});
  const std::string out = b.Op("fused_attention", {{"Q", {e}}, {"K", {e}}, {"V", {e}}}, {"Out", "LSE"},
                               {{"scale", 0.5f}})[0];
  EXPECT_EQ(RoundTrip(b, {{"ids", test::Int64Tensor({2, 3, 1}, {1, 0, 9, 4, 4, 2})}}, out), "");
}

TEST(OnnxExportTest, RefusesWhatOnnxExportCannotExpress) {
  ProgramBuilder b(6);
  const std::string x = b.Data("x", {2, 3});
  const std::string s = b.Op1("sin", {{"X", {x}}});
  Scope scope;
  std::string err = test::ErrorOf([&] { ExportOnnxModelBytes(b.main(), {"x"}, {s}, scope); });
  EXPECT_NE(err.find("op #0 'sin' (output '" + s + "'): kiln op 'sin' has no ONNX mapping"), std::string::npos) << err;

  ProgramBuilder t(7);
  const std::string y = t.Data("y", {2, 3, 4, 4});
  const std::string d = t.Op1("dropout", {{"X", {y}}}, {{"dropout_prob", 0.5f}});
  err = test::ErrorOf([&] { ExportOnnxModelBytes(t.main(), {"y"}, {d}, scope); });
  EXPECT_NE(err.find("dropout in training mode (is_test false)"), std::string::npos) << err;
  EXPECT_NE(err.find("(output '" + d + "')"), std::string::npos) << err;

  ProgramBuilder p(8);
  const std::string w = p.Param("w", {3, 3}, Init::Uniform(1));
  const std::string m = p.Op1("matmul", {{"X", {p.Data("z", {2, 3})}}, {"Y", {w}}});
  err = test::ErrorOf([&] { ExportOnnxModelBytes(p.main(), {"z"}, {m}, scope); });
  EXPECT_NE(err.find("parameter 'w' has no value"), std::string::npos) << err;
  Executor().RunProgram(p.startup(), scope);
  err = test::ErrorOf([&] { ExportOnnxModelBytes(p.main(), {"z"}, {"nope"}, scope); });
  EXPECT_NE(err.find("fetch 'nope'"), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln
