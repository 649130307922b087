// kiln export --onnx (tools/export_command.cc): each built-in model, trained
// a few steps, exported as ONNX, is accepted by onnx::checker and, imported
// back with kiln import, computes on a batch what `kiln predict` computes
// from the kiln inference model (1e-5 of the largest output). Bad input (an
// op with no ONNX mapping, an unwritable --out, no --from) exits non-zero
// with a message naming it and writes nothing.
#include <gtest/gtest.h>

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "framework/data/npy.h"
#include "framework/file_util.h"
#include "tests/cli_util.h"
#include "tests/onnx_model_builder.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class OnnxExportCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("kiln_onnx_export_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  test::CliResult Kiln(const std::string& args) { return test::RunKiln(KILN_BINARY, args + " --progress=false"); }
  std::string dir_;
};

// The ONNX checker on a file, as the importer's users would run it.
std::string CheckerError(const std::string& path) {
  onnx::ModelProto model;
  if (!model.ParseFromString(ReadFile(path))) return "does not parse";
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

double MaxAbs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(double{t.data<float>()[i]}));
  return m;
}

double MaxDiff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double{a.data<float>()[i]} - b.data<float>()[i]));
  return m;
}

struct BuiltIn {
  std::string model, flags;
  Dims batch;
};

TEST_F(OnnxExportCommandTest, BuiltInModelsRoundTripThroughTheImporter) {
  const std::string fetch = "softmax_with_cross_entropy_0.Softmax";
  const std::vector<BuiltIn> models = {
      {"mlp", "--dataset digits", {7, 64}},
      {"cnn", "--dataset digits", {7, 1, 8, 8}},
      {"transformer", "--seq_len 16 --d_model 32 --num_heads 2 --ffn_dim 64", {7, 16, 32}}};
  for (const BuiltIn& m : models) {
    SCOPED_TRACE(m.model);
    const std::string base = dir_ + "/" + m.model;
    auto r = Kiln("train --model " + m.model + " " + m.flags + " --epochs 1 --max_steps 4 --save_dir " + base + "_ck");
    ASSERT_EQ(r.code, 0) << r.output;
    ASSERT_EQ((r = Kiln("export --from " + base + "_ck --out " + base + "_model")).code, 0) << r.output;
    r = Kiln("export --from " + base + "_ck --out " + base + ".onnx --onnx");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("-> " + base + ".onnx (ONNX opset 17, "), std::string::npos) << r.output;
    EXPECT_EQ(CheckerError(base + ".onnx"), "");
    ASSERT_EQ((r = Kiln("import " + base + ".onnx --out " + base + "_re")).code, 0) << r.output;
    EXPECT_NE(r.output.find("feeds features, fetches " + fetch), std::string::npos) << r.output;

    std::mt19937 rng(3);
    WriteNpy(base + "_x.npy", test::RandomTensor(m.batch, DataType::kFP32, rng, 0, 1));
    r = Kiln("predict --use_jit=false --model " + base + "_model --feed features=" + base + "_x.npy --out " + base +
             "_want");
    ASSERT_EQ(r.code, 0) << r.output;
    r = Kiln("run --program " + base + "_re/program.pbtxt --from " + base + "_re --feed features=" + base +
             "_x.npy --fetch " + fetch + " --out " + base + "_got");
    ASSERT_EQ(r.code, 0) << r.output;
    const Tensor want = ReadNpy(base + "_want/" + fetch + ".npy");
    const Tensor got = ReadNpy(base + "_got/" + fetch + ".npy");
    ASSERT_EQ(got.dims(), want.dims());
    const double diff = MaxDiff(got, want);
    EXPECT_LE(diff, 1e-5 * MaxAbs(want));
    std::printf("%s: max |kiln - ONNX round trip| = %.3g (max |out| %.3g)\n", m.model.c_str(), diff, MaxAbs(want));

    // The re-imported model exports again, as ONNX and as a kiln model.
    ASSERT_EQ((r = Kiln("export --from " + base + "_re --out " + base + "_again.onnx --onnx")).code, 0) << r.output;
    EXPECT_EQ(CheckerError(base + "_again.onnx"), "");
    ASSERT_EQ((r = Kiln("export --from " + base + "_re --out " + base + "_re_model")).code, 0) << r.output;
  }
}

TEST_F(OnnxExportCommandTest, BadInputIsNamedAndNothingIsWritten) {
  // An imported model whose sin has no ONNX mapping in the exporter.
  test::OnnxModelBuilder m(14);
  m.Input("x", {-1, 3}).Floats("w", {3, 2}, {1, 0, -1, 0.5f, 0.5f, 0.5f});
  m.Node("MatMul", {"x", "w"}, {"h"});
  m.Node("Sin", {"h"}, {"y"});
  m.Output("y", {-1, 2});
  m.Write(dir_ + "/sin.onnx");
  auto r = Kiln("import " + dir_ + "/sin.onnx --out " + dir_ + "/sin");
  ASSERT_EQ(r.code, 0) << r.output;
  r = Kiln("export --from " + dir_ + "/sin --out " + dir_ + "/sin_out.onnx --onnx");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("op #1 'sin' (output 'y'): kiln op 'sin' has no ONNX mapping"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/sin_out.onnx"));

  r = Kiln("train --model mlp --dataset digits --epochs 1 --max_steps 2 --save_dir " + dir_ + "/ck");
  ASSERT_EQ(r.code, 0) << r.output;
  r = Kiln("export --from " + dir_ + "/ck --out " + dir_ + "/no/such/dir/m.onnx --onnx");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir_ + "/no/such/dir"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/no"));

  r = Kiln("export --out " + dir_ + "/m.onnx --onnx");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--from is required"), std::string::npos) << r.output;
  r = Kiln("export --from " + dir_ + "/ck --out " + dir_ + "/m.onnx --onnx=yes");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--onnx takes no value"), std::string::npos) << r.output;
  r = Kiln("predict --model " + dir_ + "/ck --onnx --out " + dir_ + "/p");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("unknown flag --onnx"), std::string::npos) << r.output;
  r = Kiln("export --from " + dir_ + "/missing --out " + dir_ + "/m.onnx --onnx");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("no checkpoint"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/m.onnx"));
}

}  // namespace
}  // namespace kiln
