// Seeded synthetic datasets for the ResNet and GPT models (models.h), for
// `kiln train --dataset synthetic`: tasks a model can learn, so the loss
// falls, made from std::mt19937_64 output alone (the same values with any
// standard library).
#pragma once

#include <cstdint>

#include "framework/data/dataset.h"

namespace kiln {

// Images: FP32 [n, channels, height, width], labels INT64 [n, 1] uniform
// over `classes`. Each class has a fixed texture, a 4x4 tile per channel
// (uniform in [-1, 1), drawn from a seed of its own) repeated over the image;
// an image is its class's texture plus noise uniform in [-1, 1). A
// texture, not a fixed picture: convolutions and a global average pool can
// tell the classes apart. Requires n >= 0, channels, height, width >= 1 and
// classes >= 2 (InvalidArgument otherwise).
Dataset MakeSyntheticImages(int64_t n, int64_t channels, int64_t height, int64_t width, int64_t classes,
                            uint64_t seed);

// Token sequences for a language model: features FP32 [n, length] holding
// token ids in [0, vocab) (exact integers), labels INT64 [n, 1] the last
// token of each row. A fixed successor table (a random permutation of the
// vocabulary, drawn from a seed of its own) makes the task: the first token
// is uniform, and each next token is the successor of the one before with
// probability 3/4, else uniform. Requires n >= 0, length >= 2 and vocab >= 2.
Dataset MakeSyntheticTokens(int64_t n, int64_t length, int64_t vocab, uint64_t seed);

}  // namespace kiln
