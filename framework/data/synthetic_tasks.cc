#include "framework/data/synthetic_tasks.h"

#include <random>
#include <utility>
#include <vector>

#include "framework/error.h"

namespace kiln {
namespace {

// The fixed part of each task (templates, successor table) comes from here,
// so calls with different seeds sample the same task.
constexpr uint64_t kTaskSeed = 0x6b696c6e5f7461ULL;
// The side of a class's image texture.
constexpr int64_t kTile = 4;

// Uniform in [0, 1) from the top 53 bits.
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Uniform in [0, n) by rejection sampling (no modulo bias).
int64_t UniformInt(std::mt19937_64& rng, int64_t n) {
  const uint64_t range = static_cast<uint64_t>(n);
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t v = rng();
  while (v >= limit) v = rng();
  return static_cast<int64_t>(v % range);
}

}  // namespace

Dataset MakeSyntheticImages(int64_t n, int64_t channels, int64_t height, int64_t width, int64_t classes,
                            uint64_t seed) {
  if (n < 0 || channels < 1 || height < 1 || width < 1 || classes < 2) {
    ThrowInvalidArgument("MakeSyntheticImages: need n >= 0, channels, height, width >= 1, classes >= 2; got n=", n,
                         " ", channels, "x", height, "x", width, " classes=", classes);
  }
  const int64_t size = channels * height * width;
  std::mt19937_64 task(kTaskSeed);
  std::vector<float> tiles(static_cast<size_t>(classes * channels * kTile * kTile));
  for (float& v : tiles) v = static_cast<float>(2.0 * Uniform(task) - 1.0);
  Dataset data;
  data.features = Tensor(DataType::kFP32, {n, channels, height, width});
  data.labels = Tensor(DataType::kINT64, {n, 1});
  float* x = data.features.mutable_data<float>();
  int64_t* y = data.labels.mutable_data<int64_t>();
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    y[i] = UniformInt(rng, classes);
    float* xi = x + i * size;
    for (int64_t c = 0; c < channels; ++c) {
      const float* tile = tiles.data() + (y[i] * channels + c) * kTile * kTile;
      for (int64_t h = 0; h < height; ++h) {
        for (int64_t w = 0; w < width; ++w) {
          xi[(c * height + h) * width + w] =
              tile[(h % kTile) * kTile + w % kTile] + static_cast<float>(2.0 * Uniform(rng) - 1.0);
        }
      }
    }
  }
  return data;
}

Dataset MakeSyntheticTokens(int64_t n, int64_t length, int64_t vocab, uint64_t seed) {
  if (n < 0 || length < 2 || vocab < 2) {
    ThrowInvalidArgument("MakeSyntheticTokens: need n >= 0, length >= 2, vocab >= 2; got n=", n,
                         " length=", length, " vocab=", vocab);
  }
  // Fisher-Yates from the last element down.
  std::vector<int64_t> successor(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) successor[v] = v;
  std::mt19937_64 task(kTaskSeed);
  for (int64_t i = vocab - 1; i > 0; --i) std::swap(successor[i], successor[UniformInt(task, i + 1)]);
  Dataset data;
  data.features = Tensor(DataType::kFP32, {n, length});
  data.labels = Tensor(DataType::kINT64, {n, 1});
  float* x = data.features.mutable_data<float>();
  int64_t* y = data.labels.mutable_data<int64_t>();
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    int64_t token = UniformInt(rng, vocab);
    x[i * length] = static_cast<float>(token);
    for (int64_t j = 1; j < length; ++j) {
      token = UniformInt(rng, 4) < 3 ? successor[token] : UniformInt(rng, vocab);
      x[i * length + j] = static_cast<float>(token);
    }
    y[i] = token;
  }
  return data;
}

}  // namespace kiln
