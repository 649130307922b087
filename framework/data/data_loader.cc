#include "framework/data/data_loader.h"

#include <algorithm>
#include <utility>

#include "framework/error.h"

namespace kiln {
namespace {

const DataLoaderOptions& Checked(const DataLoaderOptions& options) {
  CheckBatcherOptions(options.batcher, "DataLoader");
  if (options.num_workers < 0) ThrowInvalidArgument("DataLoader: num_workers must be >= 0, got ", options.num_workers);
  if (options.prefetch_factor < 1) {
    ThrowInvalidArgument("DataLoader: prefetch_factor must be >= 1, got ", options.prefetch_factor);
  }
  return options;
}

// The rows every array holds; throws naming the first array that differs.
int64_t CheckArrays(const std::vector<Tensor>& arrays) {
  if (arrays.empty()) ThrowInvalidArgument("DataLoader: expected at least one array, got none");
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Tensor& a = arrays[i];
    if (a.rank() < 1) {
      ThrowInvalidArgument("DataLoader: arrays[", i, "]: expected at least 1 dim (one row per sample), got ",
                           a.ShapeString());
    }
    if (!a.initialized() && a.numel() > 0) ThrowInvalidArgument("DataLoader: arrays[", i, "] holds no data");
    if (a.dim(0) != arrays[0].dim(0)) {
      ThrowInvalidArgument("DataLoader: arrays[", i, "] has ", a.dim(0), " rows, arrays[0] has ", arrays[0].dim(0),
                           ": every array needs one row per sample");
    }
  }
  return arrays[0].dim(0);
}

int64_t CheckedRows(const Dataset& data) {
  CheckDataset(data, "DataLoader");
  return data.size();
}

}  // namespace

DataLoader::DataLoader(Gather gather, int64_t rows, DataLoaderOptions options)
    : gather_(std::move(gather)),
      rows_(rows),
      options_(Checked(options)),
      num_batches_(NumBatches(rows_, options_.batcher)),
      window_(static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor) {}

DataLoader::DataLoader(const Dataset& data, DataLoaderOptions options)
    : DataLoader(
          [data](const std::vector<int64_t>& rows) {
            Dataset batch = GatherRows(data, rows);
            return std::vector<Tensor>{std::move(batch.features), std::move(batch.labels)};
          },
          CheckedRows(data), options) {
  from_dataset_ = true;
}

DataLoader::DataLoader(std::vector<Tensor> arrays, DataLoaderOptions options)
    : DataLoader([arrays](const std::vector<int64_t>& rows) { return GatherTensorRows(arrays, rows); },
                 CheckArrays(arrays), options) {}

DataLoader::~DataLoader() { JoinWorkers(); }

std::vector<Tensor> DataLoader::Make(int64_t k) const {
  const int64_t begin = k * options_.batcher.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batcher.batch_size, rows_);
  const std::vector<int64_t> rows(order_.begin() + begin, order_.begin() + end);
  try {
    return gather_(rows);
  } catch (const Error& e) {
    throw Error(e.code(), StrCat("data loader: epoch ", epoch_, ", batch ", k, ": ", e.what()));
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInternal, StrCat("data loader: epoch ", epoch_, ", batch ", k, ": ", e.what()));
  }
}

void DataLoader::Work() {
  for (;;) {
    int64_t k = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // The window bounds the batches made but not taken: memory stays at
      // window_ + 1 batches however slow the caller is.
      space_cv_.wait(lock, [&] { return stop_ || claimed_ >= end_ || claimed_ < next_ + window_; });
      if (stop_ || claimed_ >= end_) {
        --running_;
        return;
      }
      k = claimed_++;
    }
    Made made;
    try {
      made.tensors = Make(k);
    } catch (...) {
      made.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      made_[k] = std::move(made);
    }
    made_cv_.notify_one();
  }
}

void DataLoader::JoinWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  space_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  // No worker runs from here on: the fields below are the caller's alone.
  made_.clear();
  stop_ = false;
  running_ = 0;
}

void DataLoader::StartEpoch(int64_t epoch, int64_t first_batch) {
  if (epoch < 0) ThrowInvalidArgument("DataLoader: epoch must be >= 0, got ", epoch);
  if (first_batch < 0 || first_batch > num_batches_) {
    ThrowInvalidArgument("DataLoader: first batch ", first_batch, " outside [0, ", num_batches_, "]");
  }
  JoinWorkers();
  order_ = EpochOrder(rows_, options_.batcher, epoch);
  epoch_ = epoch;
  started_ = true;
  next_ = claimed_ = first_batch;
  end_ = num_batches_;
  const int64_t threads = std::min<int64_t>(options_.num_workers, end_ - first_batch);
  running_ = static_cast<int>(threads);
  for (int64_t i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

void DataLoader::Stop() {
  JoinWorkers();
  next_ = end_ = 0;
}

bool DataLoader::Next(std::vector<Tensor>* batch) {
  if (!started_) StartEpoch(0);
  if (workers_.empty()) {  // num_workers = 0, an epoch without batches, or stopped
    if (next_ >= end_) return false;
    const int64_t k = next_++;
    try {
      *batch = Make(k);
    } catch (...) {
      Stop();
      throw;
    }
    return true;
  }
  Made made;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (next_ >= end_) return false;
    // Batch next_ has been claimed or will be: every worker claims in order
    // and none stops before end_ while stop_ is false.
    made_cv_.wait(lock, [&] { return made_.count(next_) > 0; });
    auto it = made_.find(next_);
    made = std::move(it->second);
    made_.erase(it);
    ++next_;
  }
  space_cv_.notify_all();
  if (made.error) {
    Stop();
    std::rethrow_exception(made.error);
  }
  *batch = std::move(made.tensors);
  return true;
}

bool DataLoader::Next(Dataset* batch) {
  KILN_CHECK(from_dataset_, "DataLoader::Next(Dataset*) on a loader of arrays");
  std::vector<Tensor> tensors;
  if (!Next(&tensors)) return false;
  batch->features = std::move(tensors[0]);
  batch->labels = std::move(tensors[1]);
  batch->generate = nullptr;
  return true;
}

int DataLoader::running_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

}  // namespace kiln
