// The small training setups the JIT and in-place tests run with their
// feature on and off: the MLP and an 8x8 CNN on digits, the transformer on
// synthetic sequences, each with a different optimizer.
#pragma once

#include <string>
#include <vector>

#include "framework/data/dataset.h"
#include "framework/models/models.h"

namespace kiln::test {

struct TrainCase {
  std::string name;
  Model model;
  Dataset train, test;
};

// mlp (adam), cnn (momentum), transformer (sgd), in that order.
std::vector<TrainCase> SmallTrainCases();

}  // namespace kiln::test
