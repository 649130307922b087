// A dataset whose rows say where they came from: features [N, F] with row
// i = {i, i + 0.5, ...} and label 100 + i, so a batch row shows which
// dataset row it is and that its label matches.
#pragma once

#include <cstdint>

#include "framework/data/dataset.h"

namespace kiln {
namespace test {

inline Dataset Numbered(int64_t n, int64_t f = 3) {
  Dataset d;
  d.features = Tensor(DataType::kFP32, {n, f});
  d.labels = Tensor(DataType::kINT64, {n, 1});
  float* x = d.features.mutable_data<float>();
  int64_t* y = d.labels.mutable_data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < f; ++j) x[i * f + j] = static_cast<float>(i) + 0.5f * static_cast<float>(j);
    y[i] = 100 + i;
  }
  return d;
}

}  // namespace test
}  // namespace kiln
