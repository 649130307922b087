// End to end: real models trained on real (and synthetic) data reach their
// targets. These are the framework's acceptance tests; they take seconds to
// about a minute each on 2 cores.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>

#include "framework/data/digits.h"
#include "framework/data/idx.h"
#include "framework/data/synthetic.h"
#include "framework/trainer.h"

namespace kiln {
namespace {

TEST(TrainE2eTest, MlpOnDigitsReaches95Percent) {
  const TrainTest data = LoadDigits(kDefaultDigitsPath, /*seed=*/1);
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kMomentum;
  tc.lr = 0.1f;
  tc.seed = 1;
  MlpConfig mc;
  const Model m = BuildMlp(mc, tc);
  TrainOptions o;
  o.epochs = 20;
  o.batch_size = 32;
  const TrainResult r = Train(m, data.train, data.test, o);
  EXPECT_GE(r.test_accuracy, 0.95);
  EXPECT_LT(r.final_loss, r.first_loss);
}

TEST(TrainE2eTest, MlpReferenceAndOneDnnKernelsAgree) {
  const TrainTest data = LoadDigits(kDefaultDigitsPath, 2);
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kAdam;
  tc.lr = 0.01f;
  const Model m = BuildMlp(MlpConfig{}, tc);
  TrainOptions o;
  o.epochs = 1;
  o.batch_size = 64;
  o.max_steps = 15;
  o.exec.use_onednn = false;
  const TrainResult ref = Train(m, data.train, data.test, o);
  o.exec.use_onednn = true;
  const TrainResult dnn = Train(m, data.train, data.test, o);
  ASSERT_EQ(ref.losses.size(), dnn.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(ref.losses[i], dnn.losses[i], 1e-4 * std::max(1.f, std::fabs(ref.losses[i]))) << "step " << i;
  }
}

TEST(TrainE2eTest, CnnOnFashionMnistReaches85PercentWithin3Epochs) {
  struct stat st;
  if (::stat(kDefaultFashionMnistDir, &st) != 0) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TrainTest data = LoadFashionMnist(kDefaultFashionMnistDir);
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kAdam;
  tc.lr = 0.002f;
  tc.seed = 1;
  const Model m = BuildCnn(CnnConfig{}, tc);
  TrainOptions o;
  o.epochs = 3;
  o.batch_size = 64;
  double best = 0;
  int epochs_run = 0;
  o.on_epoch = [&](int epoch, double acc) {
    best = std::max(best, acc);
    epochs_run = epoch + 1;
    std::printf("cnn fashion-mnist epoch %d: test accuracy %.4f\n", epoch + 1, acc);
  };
  const TrainResult r = Train(m, data.train, data.test, o);
  EXPECT_EQ(epochs_run, 3);
  EXPECT_GE(std::max(best, r.test_accuracy), 0.85);
}

TEST(TrainE2eTest, TransformerHalvesSyntheticLoss) {
  const Dataset all = MakeSyntheticSequences(2048, 16, 32, 10, /*seed=*/5);
  auto [train, test] = SplitDataset(all, 0.8);
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kAdam;
  tc.lr = 0.003f;
  tc.seed = 5;
  const Model m = BuildTransformer(TransformerConfig{}, tc);
  TrainOptions o;
  o.epochs = 8;
  o.batch_size = 32;
  const TrainResult r = Train(m, train, test, o);
  std::printf("transformer: first loss %.4f, final loss %.4f, test accuracy %.4f\n", r.first_loss, r.final_loss,
              r.test_accuracy);
  EXPECT_LE(r.final_loss, 0.5f * r.first_loss);
}

}  // namespace
}  // namespace kiln
