// kiln train --from DIR [--program P.pbtxt] (tools/model_flags.cc,
// BuildFromProgram in framework/models): an ONNX classifier that kiln import
// wrote to DIR trains on a dataset like a built-in model, with the JIT off
// and on alike, frozen initializers untouched, checkpoints that resume; a
// model kiln train cannot feed is refused before any training, naming the
// shapes or vars.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

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

// He-uniform values U(-a, a), a = sqrt(6 / fan_in), from a fixed LCG.
std::vector<float> HeUniform(int64_t fan_in, int64_t n, uint64_t seed) {
  const float a = std::sqrt(6.f / static_cast<float>(fan_in));
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed;
  for (float& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = a * (2.f * static_cast<float>(s >> 40) / static_cast<float>(1ULL << 24) - 1.f);
  }
  return v;
}

// relu(x @ w1^T + b1) @ w2^T + b2: x [batch, 64] -> logits [batch, 10], as
// torch.nn.Linear exports (Gemm, transB).
void WriteMlp(const std::string& path, int64_t batch) {
  constexpr int64_t kIn = 64, kHidden = 32, kClasses = 10;
  OnnxModelBuilder m(14);
  m.Input("x", {batch, kIn})
      .Floats("w1", {kHidden, kIn}, HeUniform(kIn, kHidden * kIn, 1))
      .Floats("b1", {kHidden}, std::vector<float>(kHidden, 0.f))
      .Floats("w2", {kClasses, kHidden}, HeUniform(kHidden, kClasses * kHidden, 2))
      .Floats("b2", {kClasses}, std::vector<float>(kClasses, 0.01f));
  test::AttrInt(m.Node("Gemm", {"x", "w1", "b1"}, {"h"}), "transB", 1);
  m.Node("Relu", {"h"}, {"r"});
  test::AttrInt(m.Node("Gemm", {"r", "w2", "b2"}, {"logits"}), "transB", 1);
  m.Output("logits", {batch, kClasses});
  m.Write(path);
}

nlohmann::json Metrics(const std::string& path) { return nlohmann::json::parse(ReadFile(path)); }

class TrainProgramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kiln_train_program_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    WriteMlp(dir_ + "/mlp.onnx", -1);
  }
  // kiln import of `model` to DIR `out`.
  void Import(const std::string& model, const std::string& out, const std::string& flags = "") {
    const auto r = Kiln("import " + dir_ + "/" + model + " --out " + dir_ + "/" + out + flags);
    ASSERT_EQ(r.code, 0) << r.output;
  }
  std::string dir_;
};

TEST_F(TrainProgramTest, ImportedMlpTrainsOnDigitsWithTheJitOffAndOn) {
  Import("mlp.onnx", "imp");
  const std::string train = "train --program " + dir_ + "/imp/program.pbtxt --from " + dir_ +
                            "/imp --dataset digits --epochs 5 --lr 0.1";
  const auto jit = Kiln(train + " --use_jit --metrics_out " + dir_ + "/jit.json");
  ASSERT_EQ(jit.code, 0) << jit.output;
  EXPECT_NE(jit.output.find("kiln train: the program of " + dir_ + "/imp on digits"), std::string::npos)
      << jit.output;
  const auto off = Kiln(train + " --use_jit=false --metrics_out " + dir_ + "/off.json");
  ASSERT_EQ(off.code, 0) << off.output;
  const nlohmann::json mj = Metrics(dir_ + "/jit.json"), mo = Metrics(dir_ + "/off.json");
  EXPECT_EQ(mj["model"], "program");
  EXPECT_GT(mj["jit"]["launches"].get<int64_t>(), 0);
  // 5 epochs of 44 steps: 0.931..0.933 measured over seeds 1..3 (the
  // built-in mlp, 128 hidden units: 0.933..0.956); chance is 0.1.
  EXPECT_GT(mj["test_accuracy"].get<double>(), 0.88) << jit.output;
  EXPECT_LT(mj["final_loss"].get<double>(), 0.5 * mj["first_loss"].get<double>());
  const double lj = mj["final_loss"], lo = mo["final_loss"];
  EXPECT_NEAR(lj, lo, 1e-5 * std::abs(lo)) << "JIT on " << lj << ", off " << lo;
  EXPECT_NEAR(mj["test_accuracy"].get<double>(), mo["test_accuracy"].get<double>(), 1.0 / 360);
  // --from DIR alone reads DIR/program.pbtxt: the same run.
  const auto from = Kiln("train --from " + dir_ + "/imp --dataset digits --epochs 5 --lr 0.1 --use_jit=false "
                         "--metrics_out " + dir_ + "/from.json");
  ASSERT_EQ(from.code, 0) << from.output;
  EXPECT_EQ(Metrics(dir_ + "/from.json")["final_loss"].get<double>(), lo);
}

TEST_F(TrainProgramTest, FrozenInitializersStayAndCheckpointsResume) {
  Import("mlp.onnx", "imp", " --trainable w1,b1,w2");
  const std::string train = "train --from " + dir_ + "/imp --dataset digits --epochs 2 --optimizer adam --lr 0.01 "
                            "--use_jit --save_dir " + dir_ + "/ckpt --metrics_out " + dir_;
  const auto first = Kiln(train + "/a.json --max_steps 30");
  ASSERT_EQ(first.code, 0) << first.output;
  const auto resumed = Kiln(train + "/b.json --max_steps 60 --resume " + dir_ + "/ckpt");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto whole = Kiln("train --from " + dir_ + "/imp --dataset digits --epochs 2 --optimizer adam --lr 0.01 "
                          "--use_jit --max_steps 60 --metrics_out " + dir_ + "/c.json");
  ASSERT_EQ(whole.code, 0) << whole.output;
  // The last 10 losses of the resumed run are the uninterrupted run's.
  EXPECT_EQ(Metrics(dir_ + "/b.json")["final_loss"], Metrics(dir_ + "/c.json")["final_loss"]);
  // b2 is frozen: the checkpoint holds its imported value; w2 trained.
  EXPECT_EQ(test::CompareTensors(ReadNpy(dir_ + "/ckpt/ckpt-60/b2.npy"), ReadNpy(dir_ + "/imp/b2.npy"), 0, 0), "");
  EXPECT_NE(test::CompareTensors(ReadNpy(dir_ + "/ckpt/ckpt-60/w2.npy"), ReadNpy(dir_ + "/imp/w2.npy"), 0, 0), "");
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt/ckpt-60/b2.moment1.npy"));
  // Its start is the import's DIR, not a startup program of every value.
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt/ckpt-60/startup.pbtxt"));
  // kiln export reads the checkpoint like a built-in model's.
  const auto exported = Kiln("export --from " + dir_ + "/ckpt --out " + dir_ + "/model");
  EXPECT_EQ(exported.code, 0) << exported.output;
}

TEST_F(TrainProgramTest, AFixedBatchTrainsAtThatBatchSize) {
  WriteMlp(dir_ + "/b16.onnx", 16);
  Import("b16.onnx", "imp");
  // 360 test rows: the last evaluation batch (8 rows) is padded to 16.
  const auto r = Kiln("train --from " + dir_ + "/imp --dataset digits --epochs 2 --batch_size 16 --use_jit");
  ASSERT_EQ(r.code, 0) << r.output;
  // 0.9028 measured.
  EXPECT_NE(r.output.find("test accuracy: 0.9"), std::string::npos) << r.output;
  const auto wrong = Kiln("train --from " + dir_ + "/imp --dataset digits --batch_size 32");
  EXPECT_NE(wrong.code, 0);
  EXPECT_NE(wrong.output.find("the program's input 'x' [16,64] has a fixed batch of 16, and --batch_size is 32: "
                              "give --batch_size 16, or import with --input_shape NAME=-1,... for any batch"),
            std::string::npos)
      << wrong.output;
  const auto dp = Kiln("train --from " + dir_ + "/imp --dataset digits --batch_size 16 --data_parallel");
  EXPECT_NE(dp.code, 0);
  EXPECT_NE(dp.output.find("has a fixed batch of 16, which --data_parallel cannot split over its ranks"),
            std::string::npos)
      << dp.output;
}

TEST_F(TrainProgramTest, ModelsItCannotFeedAreRefusedBeforeTraining) {
  // x [N, 100]: not digits' 64 values a sample.
  {
    OnnxModelBuilder m(14);
    m.Input("x", {-1, 100}).Floats("w", {100, 10}, HeUniform(100, 1000, 3));
    m.Node("MatMul", {"x", "w"}, {"y"});
    m.Output("y", {-1, 10});
    m.Write(dir_ + "/wide.onnx");
  }
  // Two inputs.
  {
    OnnxModelBuilder m(14);
    m.Input("a", {-1, 64}).Input("b", {-1, 64}).Floats("w", {64, 10}, HeUniform(64, 640, 4));
    m.Node("Add", {"a", "b"}, {"s"});
    m.Node("MatMul", {"s", "w"}, {"y"});
    m.Output("y", {-1, 10});
    m.Write(dir_ + "/two.onnx");
  }
  // Logits per token: [N, 4, 16] -> [N, 4, 10].
  {
    OnnxModelBuilder m(14);
    m.Input("x", {-1, 4, 16}).Floats("w", {16, 10}, HeUniform(16, 160, 5));
    m.Node("MatMul", {"x", "w"}, {"y"});
    m.Output("y", {-1, 4, 10});
    m.Write(dir_ + "/tokens.onnx");
  }
  // Five classes: digits has ten.
  {
    OnnxModelBuilder m(14);
    m.Input("x", {-1, 64}).Floats("w", {64, 5}, HeUniform(64, 320, 6));
    m.Node("MatMul", {"x", "w"}, {"y"});
    m.Output("y", {-1, 5});
    m.Write(dir_ + "/five.onnx");
  }
  Import("wide.onnx", "wide");
  Import("two.onnx", "two");
  Import("tokens.onnx", "tokens");
  Import("five.onnx", "five");
  Import("mlp.onnx", "mlp");
  const std::string d = dir_ + "/";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train --from " + d + "wide --dataset digits",
       "the program's input 'x' takes samples of [100] ([-1,100]); dataset digits has samples of [64]"},
      {"train --from " + d + "mlp --dataset fashion-mnist",
       "the program's input 'x' takes samples of [64] ([-1,64]); dataset fashion-mnist has samples of [28,28]"},
      {"train --from " + d + "two --dataset digits",
       "the program takes 2 inputs (a, b); kiln train feeds one, the dataset's samples"},
      {"train --from " + d + "tokens --dataset digits",
       "the program's output 'y' is [-1,4,10], logits per token [batch, tokens, classes]; kiln train's datasets "
       "have one label per sample"},
      {"train --from " + d + "five --dataset digits",
       "the program's output 'y' [-1,5] has 5 classes; dataset digits has 10"},
      {"train --from " + d + "mlp --model cnn", "--model cnn and --from/--program both name the model: give one"},
      {"train --program " + d + "mlp/program.pbtxt", "needs --from DIR, the directory kiln import wrote"},
      {"train --from " + d + "missing", "--from " + d + "missing: not a directory"},
      {"train --from " + d, "no model.json; kiln train --from takes the directory kiln import wrote"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = Kiln(args + " --epochs 1");
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("test accuracy"), std::string::npos) << args;
  }
}

}  // namespace
}  // namespace kiln
