// kiln export and kiln predict: a trained MLP and CNN exported from their
// checkpoints reproduce, on the test set, the accuracy the training run
// measured; the inference program is pruned; bad input is named.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/inference.h"
#include "framework/data/digits.h"
#include "framework/data/npy.h"
#include "framework/file_util.h"
#include "framework/models/models.h"
#include "framework/program_io.h"
#include "tests/cli_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("kiln_export_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  test::CliResult Kiln(const std::string& args) { return test::RunKiln(KILN_BINARY, args); }
  std::string dir_;
};

// Accuracy of probabilities [N, C] against labels [N, 1].
double Accuracy(const Tensor& probs, const Tensor& labels) {
  int64_t correct = 0;
  const int64_t n = probs.dim(0), c = probs.dim(1);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = probs.data<float>() + r * c;
    correct += std::max_element(row, row + c) - row == labels.data<int64_t>()[r];
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

TEST_F(ExportTest, ExportedModelsReproduceTheTestAccuracyOfTraining) {
  // kiln train's digits split (seed 1), as .npy feeds.
  const DigitsSplit digits = LoadDigits(std::string(KILN_SOURCE_DIR) + "/tools/data/digits.csv.gz", 1);
  for (const std::string model : {"mlp", "cnn"}) {
    SCOPED_TRACE(model);
    const std::string ck = dir_ + "/" + model + "_ckpt", out = dir_ + "/" + model + "_model";
    auto r = Kiln("train --model " + model + " --dataset digits --epochs 3 --use_jit --progress=false --save_dir " +
                  ck + " --metrics_out " + dir_ + "/metrics.json");
    ASSERT_EQ(r.code, 0) << r.output;
    const double trained = nlohmann::json::parse(ReadFile(dir_ + "/metrics.json")).at("test_accuracy");
    r = Kiln("export --from " + ck + " --out " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    Tensor x = digits.test.features;
    if (model == "cnn") x.Resize({x.dim(0), 1, 8, 8});
    WriteNpy(dir_ + "/x.npy", x);
    r = Kiln("predict --model " + out + " --feed features=" + dir_ + "/x.npy --out " + dir_ + "/pred");
    ASSERT_EQ(r.code, 0) << r.output;
    const Tensor probs = ReadNpy(dir_ + "/pred/softmax_with_cross_entropy_0.Softmax.npy");
    EXPECT_EQ(Accuracy(probs, digits.test.labels), trained);
    EXPECT_GT(trained, 0.8);
    // The inference program: no labels, no loss, no grads, no optimizer.
    const std::string text = ReadFile(out + "/model.pbtxt");
    for (const char* gone : {"labels", "@GRAD", "_grad\"", "\"sgd\"", "learning_rate", "softmax_with_cross_entropy\""}) {
      EXPECT_EQ(text.find(gone), std::string::npos) << gone;
    }
  }
}

TEST_F(ExportTest, BadInputIsNamedAndNothingIsWritten) {
  auto r = Kiln("export --from " + dir_ + "/missing --out " + dir_ + "/m");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("no checkpoint"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/m"));
  r = Kiln("train --model mlp --dataset digits --epochs 1 --max_steps 2 --progress=false --save_dir " + dir_ + "/ck");
  ASSERT_EQ(r.code, 0) << r.output;
  fs::create_directories(dir_ + "/busy");
  std::ofstream(dir_ + "/busy/keep.txt") << "mine";
  r = Kiln("export --from " + dir_ + "/ck --out " + dir_ + "/busy");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("not overwriting"), std::string::npos) << r.output;
  EXPECT_EQ(ReadFile(dir_ + "/busy/keep.txt"), "mine");
  ASSERT_EQ(Kiln("export --from " + dir_ + "/ck --out " + dir_ + "/m").code, 0);
  Tensor bad(DataType::kFP32, {3, 5});
  bad.mutable_data<float>();
  WriteNpy(dir_ + "/bad.npy", bad);
  r = Kiln("predict --model " + dir_ + "/m --feed features=" + dir_ + "/bad.npy --out " + dir_ + "/p");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("features"), std::string::npos) << r.output;
  EXPECT_TRUE(!fs::exists(dir_ + "/p") || fs::is_empty(dir_ + "/p")) << "a partial output was left";
}

TEST(InferenceTest, PruningNamesWhatAFetchNeedsAndCannotHave) {
  TrainConfig tc;
  const Model m = BuildMlp(MlpConfig{}, tc);
  const proto::ProgramDesc pruned = PruneForInference(m.forward, {m.features}, {m.probs});
  for (const auto& op : pruned.blocks(0).ops()) EXPECT_NE(op.type(), "softmax_with_cross_entropy");
  std::string error;
  try {
    PruneForInference(m.forward, {}, {m.probs});
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("needs var 'features'"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln
