// In-memory labelled datasets, deterministic shuffles and splits, and a
// seeded mini-batch iterator.
//
// Every random choice here is reproducible across standard libraries: the
// permutations come from std::mt19937_64 (whose output sequence the C++
// standard fixes) through an explicit Fisher-Yates shuffle with rejection
// sampling, never through std::shuffle or std::uniform_int_distribution.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace kiln {

// Writes the features of row `row` (Numel of the per-row dims floats) to
// `out`: for datasets too large to hold, made a batch at a time.
using RowGenerator = std::function<void(int64_t row, float* out)>;

struct Dataset {
  Tensor features;  // FP32 [N, ...]; shape-only when `generate` makes the rows
  Tensor labels;    // INT64 [N, 1]
  // When set, the features are not held: GatherRows makes the rows it is
  // asked for (so does every batch a Batcher yields).
  RowGenerator generate;
  // N (0 for a default-constructed dataset).
  int64_t size() const;
};

// A train/test pair, as returned by the loaders.
struct TrainTest {
  Dataset train;
  Dataset test;
};

// Throws InvalidArgument (prefixed by `what`) unless features are FP32 of rank
// >= 1, labels INT64 [N, 1] with the same N, and both hold data (or the
// features are generated).
void CheckDataset(const Dataset& data, const std::string& what);

// A permutation of [0, n) determined by `seed` alone: Fisher-Yates from the
// last element down, index j drawn uniformly from [0, i] by rejection
// sampling on std::mt19937_64(seed) output.
std::vector<int64_t> ShuffledIndices(int64_t n, uint64_t seed);

// The rows `rows` of `data`, in that order, copied (or generated) into new
// buffers.
Dataset GatherRows(const Dataset& data, const std::vector<int64_t>& rows);
// The rows `rows` of each tensor of `columns` (any dtype, rank >= 1, one
// leading dim N shared by all), in that order, in new buffers.
std::vector<Tensor> GatherTensorRows(const std::vector<Tensor>& columns, const std::vector<int64_t>& rows);
// Rows [begin, end) copied into new buffers; of a generated dataset, a
// generated dataset of those rows (nothing is made now).
Dataset SliceRows(const Dataset& data, int64_t begin, int64_t end);
// GatherRows(data, ShuffledIndices(data.size(), seed)).
Dataset ShuffleDataset(const Dataset& data, uint64_t seed);

// The first floor(N * train_fraction) rows and the rest, in order. No
// shuffling here: loaders shuffle once with their seed, then split, so the
// split is fixed for a given seed. train_fraction must be in [0, 1].
std::pair<Dataset, Dataset> SplitDataset(const Dataset& data, double train_fraction);

struct BatcherOptions {
  int64_t batch_size = 32;
  uint64_t seed = 0;
  // false: rows in dataset order every epoch (evaluation).
  bool shuffle = true;
  // true: a final batch smaller than batch_size is dropped (training);
  // false: it is returned.
  bool drop_last = true;
};

// Throws InvalidArgument (prefixed by `what`) unless batch_size >= 1.
void CheckBatcherOptions(const BatcherOptions& options, const std::string& what);
// Batches per epoch of `rows` rows.
int64_t NumBatches(int64_t rows, const BatcherOptions& options);
// Row order of epoch `epoch` (>= 0): ShuffledIndices(rows,
// Batcher::EpochSeed(seed, epoch)) when shuffling, 0..rows-1 otherwise. Batch k of the epoch is
// order[k * batch_size, min((k + 1) * batch_size, rows)). The Batcher and the
// DataLoader (data_loader.h) both take their batches from here.
std::vector<int64_t> EpochOrder(int64_t rows, const BatcherOptions& options, int64_t epoch);

// Yields the mini-batches of one epoch at a time. The order of epoch e is
// ShuffledIndices(N, EpochSeed(seed, e)), so it depends only on (seed, e),
// not on which epochs were visited before. Every row appears exactly once
// per epoch (minus the dropped tail).
//
//   BatcherOptions options;
//   options.batch_size = 64;
//   Batcher batcher(train, options);
//   for (int64_t epoch = 0; epoch < 10; ++epoch) {
//     batcher.StartEpoch(epoch);
//     Dataset batch;
//     while (batcher.Next(&batch)) { ... batch.features, batch.labels ... }
//   }
class Batcher {
 public:
  // Keeps a reference to the buffers of `data` (Tensor copies share them).
  Batcher(const Dataset& data, BatcherOptions options);

  // Seed of epoch `epoch`: a SplitMix64 mix of (seed, epoch).
  static uint64_t EpochSeed(uint64_t seed, int64_t epoch);

  // Resets to the first batch of `epoch` (epoch >= 0). The constructor starts
  // epoch 0.
  void StartEpoch(int64_t epoch);
  // Batches per epoch.
  int64_t num_batches() const;
  // Writes the next batch (features [B, ...], labels [B, 1], in new buffers)
  // to *batch; returns false, leaving *batch alone, when the epoch is over.
  bool Next(Dataset* batch);
  // Row order of the current epoch.
  const std::vector<int64_t>& order() const { return order_; }
  int64_t epoch() const { return epoch_; }

 private:
  Dataset data_;
  BatcherOptions options_;
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace kiln
