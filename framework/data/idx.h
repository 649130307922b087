// IDX files (the MNIST / Fashion-MNIST format), gzipped or plain, and the
// Fashion-MNIST loader.
//
// IDX layout: a big-endian magic 0x0000TTNN (TT the element type, 0x08 for
// unsigned bytes, the only type read here; NN the rank), NN big-endian uint32
// dims, then the elements in row-major order and nothing after them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/data/dataset.h"
#include "framework/tensor.h"

namespace kiln {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // u8, rank 3: [N, rows, cols]
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // u8, rank 1: [N]
// Where Debian's dataset-fashion-mnist package installs the files.
constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kFashionMnistClasses = 10;

struct IdxArray {
  Dims dims;
  std::vector<uint8_t> data;  // Numel(dims) bytes
};

// Reads an IDX file of unsigned bytes whose magic must equal
// `expected_magic` (so its rank is the magic's low byte). Throws NotFound
// when the file cannot be opened, DataLoss for a corrupt gzip stream or a
// file shorter than its dims say, InvalidArgument naming the file for a wrong
// magic or trailing bytes.
IdxArray ReadIdx(const std::string& path, uint32_t expected_magic);

// FP32 [N, 1, rows, cols] = byte / 255.
Tensor LoadIdxImages(const std::string& path);
// INT64 [N, 1]; every label must be < num_classes.
Tensor LoadIdxLabels(const std::string& path, int64_t num_classes);

using FashionMnist = TrainTest;
// train-{images-idx3,labels-idx1}-ubyte.gz (60000 rows) and
// t10k-{images-idx3,labels-idx1}-ubyte.gz (10000 rows) from `dir`, in file
// order. Images must be 28x28, labels in 0-9, and each image file must hold
// as many images as its label file holds labels.
FashionMnist LoadFashionMnist(const std::string& dir = kDefaultFashionMnistDir);

}  // namespace kiln
