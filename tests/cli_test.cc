// The kiln command line: `kiln run` per OPS.md, bad input through the CLI
// (clear message, non-zero exit, no output file; a missing feed in kiln run
// and kiln predict), `kiln ops`, `kiln program`.
#include <gtest/gtest.h>

#include "tests/cli_util.h"
#include <sys/stat.h>
#include <zlib.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "framework/checkpoint/inference.h"
#include "framework/data/npy.h"
#include "framework/file_util.h"
#include "framework/program_io.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using Result = kiln::test::CliResult;

namespace fs = std::filesystem;
Result Kiln(const std::string& args) { return kiln::test::RunKiln(KILN_BINARY, args); }

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kiln_cli_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str());
    WriteFileAtomic(dir_ + "/p.pbtxt", R"pb(
version: 1
blocks {
  idx: 0 parent_idx: -1
  vars { name: "x" dtype: FP32 dims: -1 dims: 3 }
  vars { name: "w" dtype: FP32 dims: 3 dims: 2 persistable: true }
  vars { name: "lr" dtype: FP32 dims: 1 persistable: true }
  vars { name: "y" dtype: FP32 dims: -1 dims: 2 }
  vars { name: "loss" dtype: FP32 dims: 1 }
  ops { type: "matmul" inputs { name: "X" args: "x" } inputs { name: "Y" args: "w" } outputs { name: "Out" args: "y" } }
  ops { type: "mean" inputs { name: "X" args: "y" } outputs { name: "Out" args: "loss" } }
  ops { type: "sgd" inputs { name: "Param" args: "w" } inputs { name: "Grad" args: "w@GRAD" }
        inputs { name: "LearningRate" args: "lr" } outputs { name: "ParamOut" args: "w" } }
})pb");
    WriteNpy(dir_ + "/x.npy", test::FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}));
    WriteNpy(dir_ + "/w.npy", test::FloatTensor({3, 2}, {0, 0, 0, 0, 0, 0}));
    WriteNpy(dir_ + "/lr.npy", test::FloatTensor({1}, {0.5f}));
    WriteNpy(dir_ + "/xi.npy", test::Int64Tensor({2, 3}, {1, 2, 3, 4, 5, 6}));
  }
  std::string Feeds() const {
    return " --feed x=" + dir_ + "/x.npy --feed w=" + dir_ + "/w.npy --feed lr=" + dir_ + "/lr.npy";
  }
  std::string dir_;
};

TEST_F(CliTest, RunTrainsAndStacksSteps) {
  const Result r = Kiln("run --program " + dir_ + "/p.pbtxt" + Feeds() + " --append_backward loss --fetch loss,w --steps 3 --out " + dir_ + "/out");
  ASSERT_EQ(r.code, 0) << r.output;
  const Tensor loss = ReadNpy(dir_ + "/out/loss.npy");
  const Tensor w = ReadNpy(dir_ + "/out/w.npy");
  EXPECT_EQ(loss.dims(), (Dims{3, 1}));
  EXPECT_EQ(w.dims(), (Dims{3, 3, 2}));
  // loss = mean(x @ w); dL/dw[k][j] = sum_i x[i][k] / 4; w starts at 0 and
  // moves by -0.5 * grad each step.
  EXPECT_FLOAT_EQ(loss.data<float>()[0], 0.f);
  const float g0 = (1 + 4) / 4.f;  // column k = 0
  EXPECT_FLOAT_EQ(w.data<float>()[0], -0.5f * g0);             // step 1, w[0][0]
  EXPECT_FLOAT_EQ(w.data<float>()[12], -1.5f * g0);            // step 3, w[0][0]
  EXPECT_LT(loss.data<float>()[2], loss.data<float>()[1]);
}

TEST_F(CliTest, FlagsComeFromTheEnvironmentToo) {
  const Result r = Kiln("run --program " + dir_ + "/p.pbtxt" + Feeds() + " --append_backward loss --fetch loss --out " + dir_ + "/o2");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string cmd = "FLAGS_steps=4 ";
  const Result r2 = Result{std::system((cmd + KILN_BINARY + " run --program " + dir_ + "/p.pbtxt" + Feeds() +
                                         " --append_backward loss --fetch loss --out " + dir_ + "/o4 >/dev/null 2>&1").c_str()), ""};
  ASSERT_EQ(r2.code, 0);
  EXPECT_EQ(ReadNpy(dir_ + "/o4/loss.npy").dims(), (Dims{4, 1}));
}

// Each bad input: non-zero exit, a message naming what was wrong, no output.
TEST_F(CliTest, BadInputsFailCleanly) {
  struct Case {
    std::string name, setup, args, expect;
  };
  const std::string p = dir_ + "/p.pbtxt";
  const std::vector<Case> cases = {
      {"malformed", "printf 'blocks {\\n  idx: 0 oops\\n' > " + dir_ + "/bad.pbtxt",
       "--program " + dir_ + "/bad.pbtxt --fetch y", "bad.pbtxt': line 3, column 1"},
      {"unknown op", "sed 's/\"mean\"/\"meen\"/' " + p + " > " + dir_ + "/u.pbtxt",
       "--program " + dir_ + "/u.pbtxt --fetch y", "unknown op type 'meen'"},
      {"missing slot", "sed 's/inputs { name: \"Y\" args: \"w\" }//' " + p + " > " + dir_ + "/m.pbtxt",
       "--program " + dir_ + "/m.pbtxt --fetch y", "missing input slot 'Y'"},
      {"shape mismatch", "sed 's/name: \"w\" dtype: FP32 dims: 3/name: \"w\" dtype: FP32 dims: 4/' " + p + " > " + dir_ + "/s.pbtxt",
       "--program " + dir_ + "/s.pbtxt --fetch y", "op #0 'matmul'"},
      {"wrong feed dtype", "true", "--program " + p + " --feed x=" + dir_ + "/xi.npy --fetch y",
       "feed 'x': expected dtype f32, got i64"},
      {"corrupt npy", "head -c 20 " + dir_ + "/x.npy > " + dir_ + "/c.npy",
       "--program " + p + " --feed x=" + dir_ + "/c.npy --fetch y", "c.npy"},
      {"unknown fetch", "true", "--program " + p + Feeds() + " --fetch nope", "fetch 'nope'"},
      {"unfed input", "true", "--program " + p + " --feed x=" + dir_ + "/x.npy --fetch y", "input Y ('w') holds no data"},
  };
  for (const auto& c : cases) {
    ASSERT_EQ(std::system(c.setup.c_str()), 0) << c.name;
    const std::string out = dir_ + "/out_" + std::to_string(&c - cases.data());
    const Result r = Kiln("run " + c.args + " --append_backward loss --out " + out);
    EXPECT_NE(r.code, 0) << c.name;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.name << ": " << r.output;
    EXPECT_FALSE(Exists(out + "/y.npy")) << c.name << " left an output file";
  }
}

// A feed the program reads but the command line does not give is named, with
// the flag that gives it, before anything runs: non-zero exit, nothing in --out.
TEST_F(CliTest, AMissingFeedIsNamedWithTheFlagThatGivesIt) {
  const std::string out = dir_ + "/out";
  Result r = Kiln("run --program " + dir_ + "/p.pbtxt --feed w=" + dir_ + "/w.npy --feed lr=" + dir_ +
                  "/lr.npy --append_backward loss --fetch loss,w --out " + out);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("feed 'x' is missing (the program reads it): give it with --feed x=FILE.npy"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(!fs::exists(out) || fs::is_empty(out)) << "a partial output was left";

  // kiln predict on an inference model of y = x @ w.
  Scope scope;
  scope.Var("w")->GetMutable()->CopyFrom(test::FloatTensor({3, 2}, {1, 0, 0, 1, 1, 1}));
  SaveInferenceModel(dir_ + "/model", LoadProgram(dir_ + "/p.pbtxt"), {"x"}, {"y"}, scope);
  r = Kiln("predict --model " + dir_ + "/model --out " + dir_ + "/pred");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("feed 'x' is missing (the program reads it): give it with --feed x=FILE.npy"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(!fs::exists(dir_ + "/pred") || fs::is_empty(dir_ + "/pred")) << "a partial output was left";
  // Given the feed, the same model predicts.
  r = Kiln("predict --model " + dir_ + "/model --feed x=" + dir_ + "/x.npy --out " + dir_ + "/pred");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(test::CompareTensors(ReadNpy(dir_ + "/pred/y.npy"), test::FloatTensor({2, 2}, {4, 5, 10, 11}), 0, 0), "");
}

TEST_F(CliTest, CorruptCsvRowIsNamedAndNoMetricsWritten) {
  // Row 3 gets a pixel value of 99.
  const std::string csv = dir_ + "/digits.csv.gz";
  ASSERT_EQ(std::system(("zcat tools/data/digits.csv.gz | sed '3s/^0,/99,/' | gzip > " + csv).c_str()), 0);
  const Result r = Kiln("train --model mlp --dataset digits --data_dir " + dir_ + " --epochs 1 --metrics_out " + dir_ + "/m.json");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("row 3"), std::string::npos) << r.output;
  EXPECT_FALSE(Exists(dir_ + "/m.json"));
}

// No late failures: an unusable output path fails before training starts,
// and the bundled digits are found from any working directory.
TEST_F(CliTest, OutputPathsAreCheckedBeforeTrainingAndDigitsAreFoundFromAnywhere) {
  Result r = Kiln("train --model mlp --dataset digits --epochs 50 --progress=false --metrics_out /nonexistent/m.json");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--metrics_out"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("test accuracy"), std::string::npos) << "it trained before failing: " << r.output;
  r = Kiln("train --model mlp --dataset digits --epochs 50 --progress=false --save_dir /proc/kiln_ckpt");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("/proc/kiln_ckpt"), std::string::npos) << r.output;
  const std::string binary = fs::absolute(KILN_BINARY).string();
  r = kiln::test::RunCommand("cd " + dir_ + " && " + binary + " train --model mlp --dataset digits --epochs 1 --progress=false 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("test accuracy:"), std::string::npos) << r.output;
}

// A learning rate that is not finite and positive is refused before training;
// a loss that becomes NaN or Inf stops training with the step and the last
// finite loss (--stop_on_nonfinite, on by default), not a successful exit.
TEST_F(CliTest, NonFiniteLearningRateAndLossStopTraining) {
  for (const char* lr : {"nan", "inf", "0", "-0.1"}) {
    const Result r = Kiln(std::string("train --model mlp --dataset digits --epochs 1 --progress=false --lr ") + lr);
    EXPECT_NE(r.code, 0) << lr;
    EXPECT_NE(r.output.find("--lr must be a finite number greater than 0"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("test accuracy"), std::string::npos) << r.output;
  }
  // lr 1e30 diverges within a few steps.
  Result r = Kiln("train --model mlp --dataset digits --epochs 1 --progress=false --lr 1e30");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("training stopped: the loss is"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the last finite loss was"), std::string::npos) << r.output;
  r = Kiln("train --model mlp --dataset digits --epochs 1 --progress=false --lr 1e30 --stop_on_nonfinite=false");
  EXPECT_EQ(r.code, 0) << r.output;
}

// --lr_schedule: the schedule is in the program (an lr_schedule op), its step
// counter is in the checkpoint, and a resumed run ends where an uninterrupted
// one does, with the JIT off and on (the op then in the compiled cluster);
// a bad spec fails before training, naming the key.
TEST_F(CliTest, LrScheduleRunsInTheProgramAndResumes) {
  auto final_loss = [](const std::string& json) {
    const size_t at = json.find("\"final_loss\"");
    return at == std::string::npos ? std::string("none") : json.substr(at, json.find_first_of(",}", at) - at);
  };
  for (const std::string jit : {"--use_jit=false", "--use_jit"}) {
    SCOPED_TRACE(jit);
    const std::string train = "train --model mlp --dataset digits --epochs 2 --optimizer momentum --lr 0.1 " + jit +
                              " --progress=false --lr_schedule cosine:T_max=60,warmup=10,start_lr=0.01 --max_steps ";
    const std::string ckpt = dir_ + "/ckpt" + std::to_string(jit.size());
    Result r = Kiln(train + "30 --save_dir " + ckpt);
    ASSERT_EQ(r.code, 0) << r.output;
    r = Kiln(train + "60 --save_dir " + ckpt + " --resume " + ckpt + " --metrics_out " + dir_ + "/b.json");
    ASSERT_EQ(r.code, 0) << r.output;
    r = Kiln(train + "60 --metrics_out " + dir_ + "/c.json");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(final_loss(ReadFile(dir_ + "/b.json")), final_loss(ReadFile(dir_ + "/c.json")));
    EXPECT_NE(final_loss(ReadFile(dir_ + "/c.json")), "none");
    const Tensor step = ReadNpy(ckpt + "/ckpt-60/learning_rate.step.npy");
    EXPECT_EQ(step.data<float>()[0], 60.f);
  }
  Result r = Kiln("program --model mlp --lr_schedule exponential:gamma=0.9 --out " + dir_ + "/p.pbtxt");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(ReadFile(dir_ + "/p.pbtxt").find("lr_schedule"), std::string::npos);
  r = Kiln("train --model mlp --epochs 1 --progress=false --lr_schedule cosine:Tmax=5");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--lr_schedule=cosine:Tmax=5: unknown key 'Tmax'"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("test accuracy"), std::string::npos) << r.output;
}

// --weight_decay: L2 for momentum changes the run (0 is the default's run);
// adamw's decoupled coefficient is 0.01 unless given; a negative, non-finite
// or malformed value fails before anything is built or trained.
TEST_F(CliTest, WeightDecayChangesTheRunAndABadValueFailsFast) {
  auto final_loss = [this](const std::string& flags) {
    const Result r = Kiln("train --model mlp --dataset digits --epochs 1 --max_steps 40 --optimizer momentum --lr 0.1 "
                          "--progress=false " + flags + " --metrics_out " + dir_ + "/wd.json");
    EXPECT_EQ(r.code, 0) << r.output;
    const std::string json = ReadFile(dir_ + "/wd.json");
    const size_t at = json.find("\"final_loss\"");
    return at == std::string::npos ? std::string("none") : json.substr(at, json.find_first_of(",}", at) - at);
  };
  const std::string plain = final_loss("");
  EXPECT_NE(plain, "none");
  EXPECT_EQ(final_loss("--weight_decay 0"), plain);
  EXPECT_NE(final_loss("--weight_decay 0.5"), plain);
  auto coeffs = [this](const std::string& flags) {
    const Result r = Kiln("program --model mlp " + flags + " --out " + dir_ + "/wd.pbtxt");
    EXPECT_EQ(r.code, 0) << r.output;
    const std::string p = ReadFile(dir_ + "/wd.pbtxt");
    std::string found;
    for (size_t at = p.find("name: \"coeff\""); at != std::string::npos; at = p.find("name: \"coeff\"", at + 1)) {
      const size_t f = p.find("f: ", at);
      found += p.substr(f + 3, p.find('\n', f) - f - 3) + " ";
    }
    return found + std::to_string(p.find("regularization_coeff") != std::string::npos);
  };
  EXPECT_EQ(coeffs("--optimizer adamw"), "0.01 0.01 0.01 0.01 0");
  EXPECT_EQ(coeffs("--optimizer adamw --weight_decay 0.25"), "0.25 0.25 0.25 0.25 0");
  EXPECT_EQ(coeffs("--optimizer adam"), "0");
  EXPECT_EQ(coeffs("--optimizer adam --weight_decay 0.001"), "1");
  for (const char* bad : {"-0.1", "-1", "nan", "inf", "1e300"}) {
    const Result r =
        Kiln(std::string("train --model mlp --dataset digits --epochs 1 --progress=false --weight_decay=") + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.output.find("--weight_decay must be a finite number >= 0 (leave it out for the optimizer's default)"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("test accuracy"), std::string::npos) << r.output;
  }
  const Result r = Kiln("dump --model mlp --weight_decay abc --out " + dir_ + "/wd");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--weight_decay takes a number, got 'abc'"), std::string::npos) << r.output;
}

// --grad_merge_steps: the merge is in the program, its counter (steps since
// the last update) in the checkpoint, a run resumed mid-cycle ends where an
// uninterrupted one does; 0 fails before training, naming the flag.
TEST_F(CliTest, GradMergeStepsAccumulatesAndResumesMidCycle) {
  const std::string train = "train --model mlp --dataset digits --epochs 2 --optimizer adam --lr 0.01 "
                            "--progress=false --grad_merge_steps 4 --lr_schedule exponential:gamma=0.9 --max_steps ";
  Result r = Kiln(train + "10 --save_dir " + dir_ + "/ckpt");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(ReadNpy(dir_ + "/ckpt/ckpt-10/learning_rate.grad_merge_step.npy").data<float>()[0], 2.f);
  // The schedule counts the two updates, not the ten steps.
  EXPECT_EQ(ReadNpy(dir_ + "/ckpt/ckpt-10/learning_rate.step.npy").data<float>()[0], 2.f);
  r = Kiln(train + "22 --save_dir " + dir_ + "/ckpt --resume " + dir_ + "/ckpt --metrics_out " + dir_ + "/b.json");
  ASSERT_EQ(r.code, 0) << r.output;
  r = Kiln(train + "22 --metrics_out " + dir_ + "/c.json");
  ASSERT_EQ(r.code, 0) << r.output;
  auto final_loss = [](const std::string& json) {
    const size_t at = json.find("\"final_loss\"");
    return at == std::string::npos ? std::string("none") : json.substr(at, json.find_first_of(",}", at) - at);
  };
  EXPECT_EQ(final_loss(ReadFile(dir_ + "/b.json")), final_loss(ReadFile(dir_ + "/c.json")));
  EXPECT_NE(final_loss(ReadFile(dir_ + "/c.json")), "none");
  r = Kiln("program --model mlp --grad_merge_steps 3 --out " + dir_ + "/p.pbtxt");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(ReadFile(dir_ + "/p.pbtxt").find("grad_merge_step"), std::string::npos);
  r = Kiln("train --model mlp --epochs 1 --progress=false --grad_merge_steps 0");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--grad_merge_steps must be >= 1, got 0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("test accuracy"), std::string::npos) << r.output;
}

// --grad_clip_norm: one clip_by_global_norm op in the program, whose Scale
// the updates read; training runs with it, JIT off and on; a bad value fails
// before training.
TEST_F(CliTest, GradClipNormIsInTheProgramAndTrains) {
  Result r = Kiln("program --model mlp --optimizer adam --grad_clip_norm 0.5 --out " + dir_ + "/p.pbtxt");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string program = ReadFile(dir_ + "/p.pbtxt");
  EXPECT_NE(program.find("type: \"clip_by_global_norm\""), std::string::npos);
  EXPECT_NE(program.find("name: \"GradScale\""), std::string::npos);
  for (const std::string jit : {"false", "true"}) {
    r = Kiln("train --model mlp --dataset digits --epochs 1 --max_steps 20 --progress=false --grad_clip_norm 0.5 "
             "--use_jit=" + jit);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
  }
  r = Kiln("train --model mlp --epochs 1 --progress=false --grad_clip_norm -1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("grad_clip_norm (ClipGradByGlobalNorm's clip_norm) must be finite and > 0"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("test accuracy"), std::string::npos) << r.output;
}

// --num_workers: the batches made ahead on background threads are the ones
// the training loop would make, so every step's loss, the final loss and the
// test accuracy are the same bits with the loader's threads on or off.
TEST_F(CliTest, TrainGivesTheSameLossesWithAndWithoutPrefetch) {
  auto losses = [](const std::string& history) {
    std::string out;
    for (size_t at = history.find("\"loss\":"); at != std::string::npos; at = history.find("\"loss\":", at + 1)) {
      out += history.substr(at, history.find_first_of(",}", at) - at) + " ";
    }
    return out;
  };
  auto field = [](const std::string& json, const std::string& key) {
    const size_t at = json.find("\"" + key + "\"");
    return at == std::string::npos ? std::string("none") : json.substr(at, json.find_first_of(",}", at) - at);
  };
  std::string first_losses, first_metrics;
  for (const char* workers : {"0", "1", "2"}) {
    const std::string out = dir_ + "/w" + workers;
    const Result r = Kiln("train --model mlp --dataset digits --epochs 2 --batch_size 32 --optimizer momentum "
                          "--progress=false --num_workers " + std::string(workers) + " --history " + out +
                          ".jsonl --metrics_out " + out + ".json");
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string history = ReadFile(out + ".jsonl"), metrics = ReadFile(out + ".json");
    EXPECT_NE(losses(history), "");
    if (first_losses.empty()) {
      first_losses = losses(history);
      first_metrics = field(metrics, "final_loss") + field(metrics, "test_accuracy");
      continue;
    }
    EXPECT_EQ(losses(history), first_losses) << "--num_workers " << workers;
    EXPECT_EQ(field(metrics, "final_loss") + field(metrics, "test_accuracy"), first_metrics) << workers;
  }
  const Result r = Kiln("train --model mlp --epochs 1 --progress=false --num_workers -1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--num_workers must be >= 0, got -1"), std::string::npos) << r.output;
}

TEST_F(CliTest, TrainWritesMetrics) {
  const Result r = Kiln("train --model mlp --dataset digits --epochs 2 --batch_size 32 --lr 0.1 --optimizer momentum --progress=false --metrics_out " + dir_ + "/m.json");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string json = ReadFile(dir_ + "/m.json");
  for (const char* key : {"\"test_accuracy\"", "\"final_loss\"", "\"steps\"", "\"step_ms_median\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << json;
  }
  EXPECT_NE(r.output.find("test accuracy:"), std::string::npos);
}

// --jit_shadow_every: the jit section of the metrics counts the checks and
// lists the clusters a failed check denied (none for correct kernels).
TEST_F(CliTest, ShadowChecksShowInTheMetrics) {
  const Result r = Kiln("train --model mlp --dataset digits --epochs 1 --max_steps 6 --progress=false --use_jit "
                        "--eval_batch_size 256 --jit_shadow_every 2 --metrics_out " + dir_ + "/m.json");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string json = ReadFile(dir_ + "/m.json");
  // One training cluster (the whole step), launches 1, 3 and 5 checked; the
  // final evaluation launches the forward program's cluster twice (360 test
  // rows in batches of 256): launch 1 checked.
  EXPECT_NE(json.find("\"shadow_checks\": 4,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"shadow_denied\": []"), std::string::npos) << json;
  EXPECT_NE(r.output.find("jit shadow checks: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("jit shadow checks: 4, clusters denied: none"), std::string::npos) << r.output;
  const Result bad = Kiln("train --model mlp --epochs 1 --use_jit --jit_shadow_rtol -1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("--jit_shadow_rtol must be a finite number >= 0"), std::string::npos) << bad.output;
}

// --dump_passes DIR: the program before the pipeline and after each pass that
// ran, numbered in order; kiln train writes the evaluation program's files
// to DIR/forward/. An unusable DIR fails before any training.
TEST_F(CliTest, DumpPassesWritesTheProgramAfterEachPass) {
  auto files = [](const std::string& dir) {
    const std::string ls = kiln::test::RunCommand("ls " + dir + " | tr '\\n' ' '").output;
    return ls;
  };
  const std::string d = dir_ + "/passes";
  Result r = Kiln("train --model transformer --epochs 1 --max_steps 2 --progress=false --use_jit --dump_passes " + d);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string passes =
      "00_input.pbtxt 01_decomposition_fusion_pass.pbtxt 02_attention_fusion_pass.pbtxt 03_recompute_pass.pbtxt "
      "04_build_jit_pass.pbtxt 05_inplace_pass.pbtxt ";
  EXPECT_EQ(files(d), passes + "forward ");
  EXPECT_EQ(files(d + "/forward"), passes);
  EXPECT_NE(ReadFile(d + "/02_attention_fusion_pass.pbtxt").find("type: \"fused_attention_grad\""),
            std::string::npos);
  EXPECT_NE(ReadFile(d + "/03_recompute_pass.pbtxt").find("s: \"recompute\""), std::string::npos);
  EXPECT_NE(ReadFile(d + "/04_build_jit_pass.pbtxt").find("jit_launch"), std::string::npos);

  r = Kiln("run --program " + dir_ + "/p.pbtxt" + Feeds() + " --append_backward loss --fetch loss --use_inplace=false " +
           "--dump_passes " + dir_ + "/run_passes --out " + dir_ + "/out");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(files(dir_ + "/run_passes"), "00_input.pbtxt 01_decomposition_fusion_pass.pbtxt 02_recompute_pass.pbtxt ");

  r = Kiln("dump --model mlp --recompute=false --dump_passes " + dir_ + "/dump_passes --out " + dir_ + "/dump");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(files(dir_ + "/dump_passes"),
            "00_input.pbtxt 01_decomposition_fusion_pass.pbtxt 02_attention_fusion_pass.pbtxt 03_build_jit_pass.pbtxt "
            "04_inplace_pass.pbtxt ");

  r = Kiln("train --model mlp --epochs 1 --progress=false --dump_passes " + dir_ + "/p.pbtxt/sub");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--dump_passes: pass dump directory '" + dir_ + "/p.pbtxt/sub': cannot create it"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("kiln train: mlp"), std::string::npos) << "training started: " << r.output;
}

TEST_F(CliTest, OpsAndProgram) {
  const Result ops = Kiln("ops");
  ASSERT_EQ(ops.code, 0);
  for (const char* op : {"matmul\n", "conv2d\n", "adam\n", "softmax_with_cross_entropy\n", "layer_norm_grad\n"}) {
    EXPECT_NE(ops.output.find(op), std::string::npos) << op;
  }
  for (const char* model : {"mlp", "cnn", "transformer"}) {
    const Result r = Kiln(std::string("program --model ") + model + " --out " + dir_ + "/" + model + ".pbtxt");
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string text = ReadFile(dir_ + "/" + model + ".pbtxt");
    EXPECT_NE(text.find("_grad"), std::string::npos);
    EXPECT_NE(text.find("\"sgd\""), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
