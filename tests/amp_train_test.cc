// --amp bf16 end to end (separate kiln processes): the MLP on digits trains
// with the JIT on as with it off, reaches the f32 run's test accuracy within
// 0.5 points, the CNN on digits (convolutions in bf16 too) reaches it with
// the JIT on and off, the transformer reaches it too (its fused attention
// in bf16 where the CPU has AMX), and a value other than bf16 is an error
// naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/file_util.h"
#include "tests/bf16_util.h"
#include "tests/cli_util.h"

namespace kiln {
namespace {

// Issue 14: bf16 reaches the fp32 run's test accuracy within 0.5 points
// (doing better is allowed).
constexpr double kAccuracyPoints = 0.005;

struct TrainRun {
  std::vector<double> losses;  // per step
  double accuracy = -1;        // after the last epoch
};

// The number after `"key":` in `line`, or NaN.
double Field(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

// `model` on `data` for `epochs` (`batches` each; digits: 44).
TrainRun Train(const std::string& name, const std::string& flags, const std::string& model = "mlp",
               int epochs = 10, const std::string& data = "--dataset digits", size_t batches = 44) {
  const std::string history = ::testing::TempDir() + "/kiln_amp_" + name + ".jsonl";
  const std::string cmd = std::string("OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive ") + KILN_BINARY +
                           " train --model " + model + " " + data + " --epochs " + std::to_string(epochs) +
                          " --progress=false --history " + history + " " + flags + " 2>&1";
  const test::CliResult r = test::RunCommand(cmd);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
  TrainRun run;
  const std::string text = ReadFile(history);
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string line = text.substr(pos, end - pos);
    if (line.find("\"loss\":") != std::string::npos) run.losses.push_back(Field(line, "loss"));
    if (line.find("\"test_accuracy\":") != std::string::npos) run.accuracy = Field(line, "test_accuracy");
    pos = end + 1;
  }
  EXPECT_EQ(run.losses.size(), batches * epochs) << cmd;
  EXPECT_GE(run.accuracy, 0) << cmd;
  return run;
}

// Largest |a - b| / max(1, |b|) over the first `steps` losses.
double MaxLossDiff(const TrainRun& a, const TrainRun& b, size_t steps) {
  double d = 0;
  for (size_t i = 0; i < steps && i < a.losses.size() && i < b.losses.size(); ++i) {
    d = std::max(d, std::fabs(a.losses[i] - b.losses[i]) / std::max(1.0, std::fabs(b.losses[i])));
  }
  return d;
}

TEST(AmpTrainTest, MlpOnDigitsJitOnMatchesJitOffAndF32Accuracy) {
  KILN_SKIP_WITHOUT_BF16();
  const TrainRun f32 = Train("f32", "");
  const TrainRun f32_jit = Train("f32_jit", "--use_jit");
  const TrainRun bf16 = Train("bf16", "--amp bf16");
  const TrainRun bf16_jit = Train("bf16_jit", "--amp bf16 --use_jit");
  // The two bf16 runs round different intermediates to bf16 (the JIT folds
  // the weight gradient into the sgd step and converts lr * dY, the
  // framework dY), so their trajectories drift apart slowly: measured
  // 2.4e-4 over the first 30 steps. f32 JIT on and off agree to 1e-7.
  EXPECT_LT(MaxLossDiff(bf16_jit, bf16, 30), 2e-3);
  // bf16 did run, in both modes: its losses move away from f32's (measured
  // about 3e-4 within 10 steps) much further than f32's own JIT-on/off noise.
  EXPECT_GT(MaxLossDiff(bf16, f32, 30), 2e-5);
  EXPECT_GT(MaxLossDiff(bf16_jit, f32_jit, 30), 2e-5);
  EXPECT_GE(bf16.accuracy, f32.accuracy - kAccuracyPoints) << bf16.accuracy << " vs " << f32.accuracy;
  EXPECT_GE(bf16_jit.accuracy, f32.accuracy - kAccuracyPoints) << bf16_jit.accuracy << " vs " << f32.accuracy;
}

// The CNN's two convolutions (forward, input and filter gradients) and its
// fully connected layer run in bf16. Early on the runs part noticeably (at
// 10 epochs, measured: f32 0.9611, bf16 0.9417 JIT off, 0.9500 JIT on; the
// test set has 360 digits, one is 0.28 points); after 15 epochs all four
// reach 0.9722 (the bf16 JIT run 0.9778 since the filter gradients choose
// their layout per shape and the matmul+sgd kernel scales X instead of dY:
// other roundings, two more digits right).
TEST(AmpTrainTest, CnnOnDigitsReachesF32AccuracyJitOnAndOff) {
  KILN_SKIP_WITHOUT_BF16();
  const TrainRun f32 = Train("cnn_f32", "", "cnn", 15);
  const TrainRun bf16 = Train("cnn_bf16", "--amp bf16", "cnn", 15);
  const TrainRun bf16_jit = Train("cnn_bf16_jit", "--amp bf16 --use_jit", "cnn", 15);
  // bf16 did run: the losses leave f32's.
  EXPECT_GT(MaxLossDiff(bf16, f32, 30), 2e-5);
  EXPECT_GT(MaxLossDiff(bf16_jit, f32, 30), 2e-5);
  EXPECT_GE(bf16.accuracy, f32.accuracy - kAccuracyPoints) << bf16.accuracy << " vs " << f32.accuracy;
  EXPECT_GE(bf16_jit.accuracy, f32.accuracy - kAccuracyPoints) << bf16_jit.accuracy << " vs " << f32.accuracy;
}

// The transformer on its synthetic task (3,277 test sequences: 0.5 points
// is 16 of them), JIT on: matmuls in bf16, and the fused attention too
// where the CPU has AMX tiles (Bf16AttentionPays). Measured: f32 0.6121,
// bf16 0.6128.
TEST(AmpTrainTest, TransformerReachesF32Accuracy) {
  KILN_SKIP_WITHOUT_BF16();
  const std::string data = "--synthetic_size 16384";
  const TrainRun f32 = Train("transformer_f32", "--use_jit", "transformer", 6, data, 409);
  const TrainRun bf16 = Train("transformer_bf16", "--amp bf16 --use_jit", "transformer", 6, data, 409);
  EXPECT_GT(MaxLossDiff(bf16, f32, 30), 2e-5);
  EXPECT_GE(bf16.accuracy, f32.accuracy - kAccuracyPoints) << bf16.accuracy << " vs " << f32.accuracy;
}

TEST(AmpTrainTest, UnknownAmpValueNamesTheFlag) {
  const test::CliResult r =
      test::RunCommand(std::string(KILN_BINARY) + " train --model mlp --dataset digits --amp fp16 2>&1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("unknown --amp 'fp16': expected bf16"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kiln
