// DataLoader: the Batcher's batches for any number of workers, resumed
// epochs, arrays of any dtype, the bounded window, errors made on a worker,
// and shutdown in the middle of an epoch. Threaded: also run under TSan
// (tools/sanitizer_builds.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "framework/data/data_loader.h"
#include "framework/data/dataset.h"
#include "tests/expect_error.h"
#include "tests/numbered_dataset.h"

namespace kiln {
namespace {

using test::ExpectError;
using test::Numbered;

// A dataset of `n` generated rows [N, 2] = {row, -row}; `on_row` runs first
// for every row made (it may count, sleep or throw).
Dataset Generated(int64_t n, std::function<void(int64_t)> on_row) {
  Dataset d;
  d.features = Tensor(DataType::kFP32, {n, 2});
  d.features.ReleaseBuffer();
  d.labels = Tensor(DataType::kINT64, {n, 1});
  int64_t* y = d.labels.mutable_data<int64_t>();
  for (int64_t i = 0; i < n; ++i) y[i] = i;
  d.generate = [on_row](int64_t row, float* out) {
    on_row(row);
    out[0] = static_cast<float>(row);
    out[1] = -static_cast<float>(row);
  };
  return d;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() &&
         (a.bytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0);
}

DataLoaderOptions Options(int64_t batch, uint64_t seed, bool shuffle, bool drop_last, int workers, int prefetch = 2) {
  DataLoaderOptions o;
  o.batcher.batch_size = batch;
  o.batcher.seed = seed;
  o.batcher.shuffle = shuffle;
  o.batcher.drop_last = drop_last;
  o.num_workers = workers;
  o.prefetch_factor = prefetch;
  return o;
}

// Batches from `first_batch` of epoch `epoch` equal the Batcher's, byte for byte.
void ExpectBatcherBatches(DataLoader& loader, const Dataset& data, const DataLoaderOptions& o, int64_t epoch,
                          int64_t first_batch, const std::string& what) {
  Batcher batcher(data, o.batcher);
  batcher.StartEpoch(epoch);
  Dataset want, got;
  for (int64_t b = 0; b < first_batch; ++b) ASSERT_TRUE(batcher.Next(&want));
  loader.StartEpoch(epoch, first_batch);
  EXPECT_EQ(loader.order(), batcher.order()) << what;
  int64_t batches = first_batch;
  while (batcher.Next(&want)) {
    ASSERT_TRUE(loader.Next(&got)) << what << ": batch " << batches;
    EXPECT_TRUE(SameBytes(got.features, want.features)) << what << ": batch " << batches;
    EXPECT_TRUE(SameBytes(got.labels, want.labels)) << what << ": batch " << batches;
    ++batches;
  }
  EXPECT_FALSE(loader.Next(&got)) << what;
  EXPECT_EQ(batches, loader.num_batches()) << what;
}

TEST(DataLoaderTest, GivesTheBatchersBatchesForAnyNumberOfWorkers) {
  const Dataset data = Numbered(103);
  for (bool shuffle : {true, false}) {
    for (bool drop_last : {true, false}) {
      for (int workers : {0, 1, 2, 3}) {
        for (int prefetch : {1, 2}) {
          const DataLoaderOptions o = Options(8, 7, shuffle, drop_last, workers, prefetch);
          DataLoader loader(data, o);
          EXPECT_EQ(loader.num_batches(), drop_last ? 12 : 13);
          const std::string what = "shuffle " + std::to_string(shuffle) + ", drop_last " + std::to_string(drop_last) +
                                   ", workers " + std::to_string(workers) + ", prefetch " + std::to_string(prefetch);
          // Epochs out of order: each depends only on (seed, epoch).
          for (int64_t epoch : {0, 2, 1}) ExpectBatcherBatches(loader, data, o, epoch, 0, what);
        }
      }
    }
  }
}

TEST(DataLoaderTest, NextBeforeStartEpochStartsEpochZero) {
  const Dataset data = Numbered(20);
  const DataLoaderOptions o = Options(6, 3, true, true, 1);
  DataLoader loader(data, o);
  Batcher batcher(data, o.batcher);
  Dataset got, want;
  ASSERT_TRUE(loader.Next(&got));
  ASSERT_TRUE(batcher.Next(&want));
  EXPECT_TRUE(SameBytes(got.labels, want.labels));
  EXPECT_EQ(loader.epoch(), 0);
}

TEST(DataLoaderTest, ResumesAtABatchWithoutMakingTheOnesBefore) {
  std::atomic<int64_t> made{0};
  const Dataset data = Generated(50, [&](int64_t) { ++made; });
  for (int workers : {0, 2}) {
    const DataLoaderOptions o = Options(4, 5, true, true, workers);
    DataLoader loader(data, o);
    made = 0;
    ExpectBatcherBatches(loader, data, o, 1, 9, "workers " + std::to_string(workers));
    // The Batcher made all 12 batches; the loader only the last 3.
    EXPECT_EQ(made.load(), 12 * 4 + 3 * 4) << workers;
    loader.StartEpoch(0, loader.num_batches());
    Dataset batch;
    EXPECT_FALSE(loader.Next(&batch));
  }
}

TEST(DataLoaderTest, ArraysOfAnyDtypeKeepTheirRowsTogether) {
  const int64_t n = 37;
  Tensor image(DataType::kFP32, {n, 2, 3}), label(DataType::kINT64, {n}), weight(DataType::kFP64, {n, 1});
  Tensor mask(DataType::kBOOL, {n, 2}), empty(DataType::kINT32, {n, 0});
  empty.raw_mutable_data(DataType::kINT32);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 6; ++j) image.mutable_data<float>()[i * 6 + j] = static_cast<float>(i * 10 + j);
    label.mutable_data<int64_t>()[i] = i;
    weight.mutable_data<double>()[i] = 0.5 * static_cast<double>(i);
    mask.mutable_data<bool>()[2 * i] = i % 2 == 0;
    mask.mutable_data<bool>()[2 * i + 1] = i % 3 == 0;
  }
  for (int workers : {0, 1, 2}) {
    DataLoader loader({image, label, weight, mask, empty}, Options(5, 2, true, false, workers));
    loader.StartEpoch(3);
    const std::vector<int64_t> order = loader.order();
    std::vector<Tensor> batch;
    int64_t seen = 0;
    while (loader.Next(&batch)) {
      ASSERT_EQ(batch.size(), 5u);
      const int64_t rows = batch[0].dim(0);
      EXPECT_EQ(batch[0].dims(), (Dims{rows, 2, 3}));
      EXPECT_EQ(batch[4].dims(), (Dims{rows, 0}));
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = order[seen + r];
        EXPECT_EQ(batch[1].data<int64_t>()[r], i);
        EXPECT_EQ(batch[0].data<float>()[r * 6 + 5], static_cast<float>(i * 10 + 5));
        EXPECT_EQ(batch[2].data<double>()[r], 0.5 * static_cast<double>(i));
        EXPECT_EQ(batch[3].data<bool>()[2 * r + 1], i % 3 == 0);
      }
      seen += rows;
    }
    EXPECT_EQ(seen, n) << workers;
  }
}

// At most num_workers * prefetch_factor batches are made ahead of the caller.
TEST(DataLoaderTest, TheWindowBoundsTheBatchesMadeAhead) {
  std::atomic<int64_t> rows_made{0};
  const Dataset data = Generated(400, [&](int64_t) { ++rows_made; });
  DataLoader loader(data, Options(4, 1, true, true, 2, 3));
  loader.StartEpoch(0);
  auto settle = [&](int64_t want) {
    for (int i = 0; i < 500 && rows_made.load() < want; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  settle(6 * 4);
  EXPECT_EQ(rows_made.load(), 6 * 4);
  Dataset batch;
  ASSERT_TRUE(loader.Next(&batch));
  settle(7 * 4);
  EXPECT_EQ(rows_made.load(), 7 * 4);
  EXPECT_EQ(loader.running_workers(), 2);
}

TEST(DataLoaderTest, AnErrorOnAWorkerIsThrownByNextNamingTheBatch) {
  const Dataset data = Generated(30, [](int64_t row) {
    if (row == 17) ThrowDataLoss("row 17 is unreadable");
  });
  for (int workers : {0, 1, 3}) {
    const DataLoaderOptions o = Options(4, 9, true, true, workers);
    DataLoader loader(data, o);
    for (int64_t epoch : {0, 1}) {
      loader.StartEpoch(epoch);
      int64_t position = 0;
      while (loader.order()[position] != 17) ++position;
      const int64_t bad = position / 4;
      Dataset batch;
      for (int64_t b = 0; b < bad; ++b) ASSERT_TRUE(loader.Next(&batch)) << workers;
      ExpectError([&] { loader.Next(&batch); }, ErrorCode::kDataLoss,
                  {"data loader: epoch " + std::to_string(epoch) + ", batch " + std::to_string(bad) +
                   ": row 17 is unreadable"});
      EXPECT_FALSE(loader.Next(&batch)) << "the loader stops after an error";
      EXPECT_EQ(loader.running_workers(), 0);
    }
  }
}

// Stop, a new epoch or destruction in the middle of an epoch returns
// promptly, with workers blocked on a full window or busy making a batch.
TEST(DataLoaderTest, StoppingInTheMiddleOfAnEpochJoinsTheWorkers) {
  const Dataset slow = Generated(64, [](int64_t) { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
  for (int workers : {1, 2}) {
    DataLoader loader(slow, Options(2, 1, true, true, workers, 1));
    loader.StartEpoch(0);
    Dataset batch;
    ASSERT_TRUE(loader.Next(&batch));
    loader.Stop();
    EXPECT_EQ(loader.running_workers(), 0);
    EXPECT_FALSE(loader.Next(&batch));
    loader.StartEpoch(1);
    ASSERT_TRUE(loader.Next(&batch));
    loader.StartEpoch(2);  // replaces epoch 1 in flight
    int64_t batches = 0;
    while (loader.Next(&batch)) ++batches;
    EXPECT_EQ(batches, 32);
    loader.StartEpoch(3);
  }  // destroyed with epoch 3's workers running
  for (int i = 0; i < 20; ++i) {
    DataLoader loader(slow, Options(2, 1, true, true, 2));
    loader.StartEpoch(i);
  }
}

TEST(DataLoaderTest, AnEpochWithoutBatches) {
  DataLoader loader(Numbered(3), Options(4, 1, true, true, 2));
  EXPECT_EQ(loader.num_batches(), 0);
  Dataset batch;
  EXPECT_FALSE(loader.Next(&batch));
  EXPECT_EQ(loader.running_workers(), 0);
}

TEST(DataLoaderTest, BadInputIsRejected) {
  const Dataset data = Numbered(10);
  ExpectError([&] { DataLoader(data, Options(0, 1, true, true, 1)); }, ErrorCode::kInvalidArgument,
              {"DataLoader: batch_size must be positive, got 0"});
  ExpectError([&] { DataLoader(data, Options(2, 1, true, true, -1)); }, ErrorCode::kInvalidArgument,
              {"DataLoader: num_workers must be >= 0, got -1"});
  ExpectError([&] { DataLoader(data, Options(2, 1, true, true, 1, 0)); }, ErrorCode::kInvalidArgument,
              {"DataLoader: prefetch_factor must be >= 1, got 0"});
  Dataset bad = Numbered(4);
  bad.labels = Tensor(DataType::kINT64, {3, 1});
  bad.labels.mutable_data<int64_t>();
  ExpectError([&] { DataLoader(bad, Options(2, 1, true, true, 1)); }, ErrorCode::kInvalidArgument,
              {"DataLoader: labels: expected i64[4,1], got i64[3,1]"});
  ExpectError([&] { DataLoader(std::vector<Tensor>{data.features, bad.labels}, Options(2, 1, true, true, 1)); },
              ErrorCode::kInvalidArgument, {"DataLoader: arrays[1] has 3 rows, arrays[0] has 10"});
  Tensor scalar(DataType::kFP32, {});
  scalar.mutable_data<float>();
  ExpectError([&] { DataLoader(std::vector<Tensor>{scalar}, Options(2, 1, true, true, 1)); },
              ErrorCode::kInvalidArgument, {"DataLoader: arrays[0]: expected at least 1 dim"});
  ExpectError([&] { DataLoader(std::vector<Tensor>{}, Options(2, 1, true, true, 1)); }, ErrorCode::kInvalidArgument,
              {"DataLoader: expected at least one array, got none"});
  DataLoader loader(data, Options(2, 1, true, true, 1));
  ExpectError([&] { loader.StartEpoch(-1); }, ErrorCode::kInvalidArgument, {"epoch must be >= 0, got -1"});
  ExpectError([&] { loader.StartEpoch(0, 6); }, ErrorCode::kInvalidArgument, {"first batch 6 outside [0, 5]"});
}

}  // namespace
}  // namespace kiln
