// kiln import (tools/import_command.cc) and the way its output is used:
// `kiln run --program DIR/program.pbtxt --from DIR`. Bad input (a missing
// file, a corrupt or refused model, an --out holding something else, a
// malformed --input_shape) exits non-zero with a message naming it, and
// leaves nothing at --out.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "framework/data/npy.h"
#include "framework/file_util.h"
#include "tests/cli_util.h"
#include "tests/onnx_model_builder.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::OnnxModelBuilder;

test::CliResult Kiln(const std::string& args) { return test::RunKiln(KILN_BINARY, args); }

class ImportCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kiln_import_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // y = relu(x @ w^T + b) with w [2,3], b [2]; x [N,3].
    OnnxModelBuilder m(14);
    m.Input("x", {-1, 3}).Floats("w", {2, 3}, {1, 0, -1, 0.5f, 0.5f, 0.5f}).Floats("b", {2}, {0.25f, -1});
    test::AttrInt(m.Node("Gemm", {"x", "w", "b"}, {"g"}), "transB", 1);
    m.Node("Relu", {"g"}, {"y"});
    m.Output("y", {-1, 2});
    m.Write(dir_ + "/m.onnx");
  }
  std::string dir_;
};

TEST_F(ImportCommandTest, WritesACheckpointThatKilnRunStartsFrom) {
  const auto r = Kiln("import " + dir_ + "/m.onnx --out " + dir_ + "/imported");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("-> " + dir_ + "/imported (opset 14, 3 ops, 2 parameters, 0 state vars; feeds x, fetches y)"),
            std::string::npos)
      << r.output;
  for (const char* f : {"program.pbtxt", "model.json", "manifest.json", "w.npy", "b.npy"}) {
    EXPECT_TRUE(fs::exists(dir_ + "/imported/" + f)) << f;
  }
  const std::string model = ReadFile(dir_ + "/imported/model.json");
  EXPECT_NE(model.find("\"onnx_name\": \"x\""), std::string::npos) << model;
  EXPECT_NE(model.find("\"shape\": [\n        -1,\n        3\n      ]"), std::string::npos) << model;

  WriteNpy(dir_ + "/x.npy", test::FloatTensor({2, 3}, {1, 2, 3, -4, 0, 2}));
  const auto run = Kiln("run --program " + dir_ + "/imported/program.pbtxt --from " + dir_ + "/imported --feed x=" +
                        dir_ + "/x.npy --fetch y --out " + dir_ + "/out");
  ASSERT_EQ(run.code, 0) << run.output;
  // [1-3+0.25, 0.5*6-1] and [-4-2+0.25, 0.5*-2-1], relu'd.
  EXPECT_EQ(test::CompareTensors(ReadNpy(dir_ + "/out/y.npy"), test::FloatTensor({2, 2}, {0, 2, 0, 0}), 1e-6, 0), "");
  // --feed wins over --from.
  WriteNpy(dir_ + "/b.npy", test::FloatTensor({2}, {10, 10}));
  const auto fed = Kiln("run --program " + dir_ + "/imported/program.pbtxt --from " + dir_ + "/imported --feed x=" +
                        dir_ + "/x.npy --feed b=" + dir_ + "/b.npy --fetch y --out " + dir_ + "/out2");
  ASSERT_EQ(fed.code, 0) << fed.output;
  EXPECT_EQ(test::CompareTensors(ReadNpy(dir_ + "/out2/y.npy"), test::FloatTensor({2, 2}, {8, 13, 4, 9}), 1e-5, 0),
            "");
  // --trainable: the bias is frozen, in the program and in model.json.
  const auto frozen = Kiln("import " + dir_ + "/m.onnx --out " + dir_ + "/frozen --trainable w");
  ASSERT_EQ(frozen.code, 0) << frozen.output;
  EXPECT_NE(frozen.output.find("1 parameters, 0 state vars, 1 frozen;"), std::string::npos) << frozen.output;
  EXPECT_NE(ReadFile(dir_ + "/frozen/model.json").find("\"frozen\": [\n    \"b\"\n  ]"), std::string::npos);
  // Importing again replaces the checkpoint.
  EXPECT_EQ(Kiln("import " + dir_ + "/m.onnx --out " + dir_ + "/imported --input_shape x=4,3").code, 0);
  EXPECT_NE(ReadFile(dir_ + "/imported/program.pbtxt").find("dims: 4"), std::string::npos);
}

TEST_F(ImportCommandTest, BadInputFailsCleanlyAndWritesNothing) {
  const std::string out = " --out " + dir_ + "/o";
  WriteFileAtomic(dir_ + "/junk.onnx", "not a model");
  OnnxModelBuilder det(14);
  det.Input("x", {2, 2});
  det.Node("Det", {"x"}, {"y"}, "det");
  det.Output("y", {});
  det.Write(dir_ + "/det.onnx");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"import " + dir_ + "/missing.onnx" + out, dir_ + "/missing.onnx"},
      {"import " + dir_ + "/junk.onnx" + out, dir_ + "/junk.onnx: not an ONNX model"},
      {"import " + dir_ + "/det.onnx" + out, "node 0 'det' (Det, opset 14): no kiln op for it (matmul only)"},
      {"import " + dir_ + "/m.onnx", "--out is required"},
      {"import" + out, "expected one model file: kiln import MODEL.onnx --out DIR (got 0)"},
      {"import " + dir_ + "/m.onnx " + dir_ + "/m.onnx" + out, "expected one model file"},
      {"import " + dir_ + "/m.onnx --input_shape x" + out, "--input_shape takes NAME=d0,d1,..."},
      {"import " + dir_ + "/m.onnx --input_shape x=2,a" + out, "--input_shape 'x=2,a': dim 'a' is not a positive"},
      {"import " + dir_ + "/m.onnx --input_shape x=0,3" + out, "dim '0' is not a positive integer or -1"},
      {"import " + dir_ + "/m.onnx --input_shape z=2,3" + out, "input shape given for 'z', which is not a graph input"},
      {"run --input_shape x=1 --program p.pbtxt", "kiln run takes no --input_shape"},
      {"import " + dir_ + "/m.onnx --trainable w,bb" + out,
       "trainable names 'bb', which is not a float initializer of the model; did you mean 'b'?"},
      {"import " + dir_ + "/m.onnx --trainable w,,b" + out, "--trainable 'w,,b': an empty name"},
      {"import " + dir_ + "/m.onnx --trainable w --trainable b" + out, "--trainable given twice"},
      {"run --trainable w --program p.pbtxt", "kiln run takes no --trainable"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = Kiln(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ + "/o")) << args;
  }
  // An --out holding something else is left alone.
  fs::create_directories(dir_ + "/busy");
  WriteFileAtomic(dir_ + "/busy/notes.txt", "mine");
  const auto busy = Kiln("import " + dir_ + "/m.onnx --out " + dir_ + "/busy");
  EXPECT_NE(busy.code, 0);
  EXPECT_EQ(ReadFile(dir_ + "/busy/notes.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir_ + "/busy/program.pbtxt")) << busy.output;
}

TEST_F(ImportCommandTest, RunFromACheckpointThatDoesNotFitIsAnError) {
  ASSERT_EQ(Kiln("import " + dir_ + "/m.onnx --out " + dir_ + "/imported").code, 0);
  WriteFileAtomic(dir_ + "/other.pbtxt", R"pb(
version: 1
blocks {
  idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP32 dims: -1 dims: 3 }
  vars { name: "y" dtype: FP32 dims: -1 dims: 3 }
  ops { type: "relu" inputs { name: "X" args: "x" } outputs { name: "Out" args: "y" } }
})pb");
  WriteNpy(dir_ + "/x.npy", test::FloatTensor({1, 3}, {1, 2, 3}));
  const auto r = Kiln("run --program " + dir_ + "/other.pbtxt --from " + dir_ + "/imported --feed x=" + dir_ +
                      "/x.npy --fetch y --out " + dir_ + "/out");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--from var 'b': the program declares no such variable"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/out/y.npy"));
}

}  // namespace
}  // namespace kiln
