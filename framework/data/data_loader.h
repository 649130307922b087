// Mini-batches made ahead of the training step: the Batcher's batches (the
// same rows in the same order for the same seed and epoch, the same
// drop_last; dataset.h EpochOrder), assembled by background threads into a
// bounded window while the caller trains on the batch before.
//
// num_workers threads claim batches in order and each gathers its batch into
// the window (at most num_workers * prefetch_factor batches made but not yet
// taken); Next hands them out in batch order, so what the caller sees does not
// depend on num_workers. With num_workers = 0 there is no thread: Next makes
// each batch itself, between steps (the synchronous baseline).
//
// An error while making batch k (a RowGenerator that throws, an allocation
// that fails) is thrown by the Next that would have returned batch k, as a
// kiln::Error with the original code whose message starts
// "data loader: epoch E, batch K: ". The loader then stops until StartEpoch.
//
// Not thread-safe: one thread calls StartEpoch, Next and Stop. Destruction
// stops and joins the workers; they touch only the loader's own state and
// the dataset's buffers, which outlive them.
//
//   DataLoaderOptions options;
//   options.batcher.batch_size = 64;
//   DataLoader loader(train, options);
//   for (int64_t epoch = 0; epoch < 10; ++epoch) {
//     loader.StartEpoch(epoch);
//     Dataset batch;
//     while (loader.Next(&batch)) { ... batch.features, batch.labels ... }
//   }
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "framework/data/dataset.h"

namespace kiln {

struct DataLoaderOptions {
  BatcherOptions batcher;  // batch_size, seed, shuffle, drop_last
  // Background threads making batches (0: none, Next makes them).
  int num_workers = 1;
  // Batches each worker may have made ahead of the caller (>= 1).
  int prefetch_factor = 2;
};

class DataLoader {
 public:
  // Batches of `data` as {features, labels}. A generated dataset's
  // RowGenerator runs on the workers (concurrently when num_workers > 1).
  // Throws InvalidArgument for a bad dataset or options.
  DataLoader(const Dataset& data, DataLoaderOptions options);
  // Batches of `columns`: tensors of any dtype and rank >= 1 with one
  // leading dim N; a batch holds the same rows of each. The tensors' buffers
  // are shared, not copied: nobody may write them while the loader lives.
  DataLoader(std::vector<Tensor> columns, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Rows of the dataset and batches per epoch.
  int64_t rows() const { return rows_; }
  int64_t num_batches() const { return num_batches_; }

  // Stops the current epoch and starts epoch `epoch` (>= 0) at batch
  // `first_batch` (0 <= first_batch <= num_batches(); a resumed run skips the
  // batches it has trained on without making them). Next before any
  // StartEpoch starts epoch 0.
  void StartEpoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the epoch, in new buffers; false when the epoch is over
  // (or stopped). Blocks until a worker has made it.
  bool Next(std::vector<Tensor>* batch);
  // For a loader made from a Dataset: features and labels of the next batch.
  bool Next(Dataset* batch);
  // Ends the epoch early: the workers stop and are joined, batches made
  // ahead are dropped; Next returns false until StartEpoch.
  void Stop();

  int64_t epoch() const { return epoch_; }
  // Row order of the current epoch.
  const std::vector<int64_t>& order() const { return order_; }
  // Background threads running now (0 between epochs, after Stop, or once
  // every batch of the epoch is made).
  int running_workers() const;

 private:
  using Gather = std::function<std::vector<Tensor>(const std::vector<int64_t>& rows)>;
  struct Made {
    std::vector<Tensor> tensors;
    std::exception_ptr error;
  };

  DataLoader(Gather gather, int64_t rows, DataLoaderOptions options);
  // Batch k of the current epoch; errors name the epoch and the batch.
  std::vector<Tensor> Make(int64_t k) const;
  void Work();
  void JoinWorkers();

  const Gather gather_;
  const int64_t rows_;
  const DataLoaderOptions options_;
  const int64_t num_batches_;
  const int64_t window_;  // num_workers * prefetch_factor
  bool started_ = false;
  bool from_dataset_ = false;
  int64_t epoch_ = 0;
  // Written only while no worker runs; the workers read it.
  std::vector<int64_t> order_;

  // Shared with the workers, under mu_.
  mutable std::mutex mu_;
  std::condition_variable made_cv_;   // a batch was made (or failed)
  std::condition_variable space_cv_;  // the caller took a batch, or stop_
  int64_t next_ = 0;      // the batch Next returns next
  int64_t claimed_ = 0;   // the next batch a worker takes
  int64_t end_ = 0;       // one past the last batch of this epoch (0 when stopped)
  bool stop_ = false;
  int running_ = 0;
  std::map<int64_t, Made> made_;
  std::vector<std::thread> workers_;
};

}  // namespace kiln
