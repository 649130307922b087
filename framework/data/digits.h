// The UCI optical handwritten digits (scikit-learn's copy; see
// tools/data/digits.rst): 1797 8x8 images, pixels 0-16, labels 0-9.
//
// File format: CSV, gzipped or plain (zlib reads both), no header, one image
// per line: 64 pixel values (row-major 8x8) then the label.
#pragma once

#include <cstdint>
#include <string>

#include "framework/data/dataset.h"

namespace kiln {

constexpr int64_t kDigitsPixels = 64;
constexpr int64_t kDigitsClasses = 10;
// Relative to the repository root (tests run there).
constexpr const char* kDefaultDigitsPath = "tools/data/digits.csv.gz";
// Where the bundled digits are, wherever kiln runs from: kDefaultDigitsPath
// when it exists (the repository root), else the file in the source tree
// kiln was built from, else beside the executable's tools/ folder. Returns
// kDefaultDigitsPath when none exists (the loader then names it).
std::string DefaultDigitsPath();

// Features FP32 [N, 64] = pixel / 16 (so in [0, 1]), labels INT64 [N, 1], in
// file order. Throws NotFound when the file cannot be opened, and
// InvalidArgument naming the file, the 1-based row (and column) and the
// problem for: an empty file, a row without 65 values, a value that is not a
// number, a pixel outside 0-16, a label that is not an integer in 0-9.
Dataset LoadDigitsCsv(const std::string& path);

using DigitsSplit = TrainTest;
// LoadDigitsCsv, then ShuffleDataset(seed), then SplitDataset(train_fraction):
// with the default 0.8, 1437 train and 360 test rows, fixed for a seed.
DigitsSplit LoadDigits(const std::string& path, uint64_t seed, double train_fraction = 0.8);

}  // namespace kiln
