#include "tests/train_cases.h"

#include "framework/data/digits.h"
#include "framework/data/synthetic.h"

namespace kiln::test {

std::vector<TrainCase> SmallTrainCases() {
  std::vector<TrainCase> cases;
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kAdam;
  tc.lr = 0.003f;
  const TrainTest digits = LoadDigits(kDefaultDigitsPath, 1);
  cases.push_back({"mlp", BuildMlp(MlpConfig{}, tc), digits.train, digits.test});
  TrainTest images = digits;
  for (Dataset* d : {&images.train, &images.test}) d->features.Resize({d->size(), 1, 8, 8});
  CnnConfig cc;
  cc.height = cc.width = 8;
  tc.optimizer = OptimizerKind::kMomentum;
  tc.lr = 0.05f;
  cases.push_back({"cnn", BuildCnn(cc, tc), images.train, images.test});
  const Dataset seqs = MakeSyntheticSequences(512, 16, 32, 10, 3);
  auto [train, test] = SplitDataset(seqs, 0.8);
  tc.optimizer = OptimizerKind::kSgd;
  tc.lr = 0.1f;
  cases.push_back({"transformer", BuildTransformer(TransformerConfig{}, tc), train, test});
  return cases;
}

}  // namespace kiln::test
