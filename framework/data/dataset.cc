#include "framework/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <random>

namespace kiln {
namespace {

// Uniform in [0, bound) from raw generator output. Rejecting the lowest
// 2^64 mod bound values leaves a multiple of `bound` equally likely values.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t u = rng();
    if (u >= threshold) return u % bound;
  }
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Dims WithLeading(const Dims& dims, int64_t n) {
  Dims out = dims;
  out[0] = n;
  return out;
}

}  // namespace

int64_t Dataset::size() const { return features.rank() == 0 ? 0 : features.dim(0); }

void CheckDataset(const Dataset& data, const std::string& what) {
  const Tensor& f = data.features;
  const Tensor& l = data.labels;
  if (f.dtype() != DataType::kFP32 || f.rank() < 1) {
    ThrowInvalidArgument(what, ": features: expected FP32 of rank >= 1, got ", f.ShapeString());
  }
  if (l.dtype() != DataType::kINT64 || l.rank() != 2 || l.dim(1) != 1 || l.dim(0) != f.dim(0)) {
    ThrowInvalidArgument(what, ": labels: expected i64[", f.dim(0), ",1], got ", l.ShapeString());
  }
  if ((!f.initialized() && !data.generate) || !l.initialized()) ThrowInvalidArgument(what, ": dataset holds no data");
}

std::vector<int64_t> ShuffledIndices(int64_t n, uint64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(n < 0 ? 0 : n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(i) + 1));
    std::swap(idx[i], idx[j]);
  }
  return idx;
}

Dataset GatherRows(const Dataset& data, const std::vector<int64_t>& rows) {
  CheckDataset(data, "GatherRows");
  const int64_t n = data.size();
  const auto count = static_cast<int64_t>(rows.size());
  const size_t row_bytes = n == 0 ? 0 : data.features.bytes() / static_cast<size_t>(n);
  Dataset out;
  out.features = Tensor(DataType::kFP32, WithLeading(data.features.dims(), count));
  out.labels = Tensor(DataType::kINT64, {count, 1});
  auto* dst = static_cast<char*>(out.features.raw_mutable_data(DataType::kFP32));
  int64_t* dst_labels = out.labels.mutable_data<int64_t>();
  const auto* src = static_cast<const char*>(data.features.raw_data());
  const int64_t* src_labels = data.labels.data<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    int64_t r = rows[i];
    if (r < 0 || r >= n) ThrowInvalidArgument("GatherRows: row ", r, " outside [0, ", n, ")");
    if (data.generate) {
      data.generate(r, reinterpret_cast<float*>(dst + i * row_bytes));
    } else if (row_bytes > 0) {
      std::memcpy(dst + i * row_bytes, src + r * row_bytes, row_bytes);
    }
    dst_labels[i] = src_labels[r];
  }
  return out;
}

std::vector<Tensor> GatherTensorRows(const std::vector<Tensor>& columns, const std::vector<int64_t>& rows) {
  const auto count = static_cast<int64_t>(rows.size());
  std::vector<Tensor> out(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) {
    const Tensor& column = columns[c];
    KILN_CHECK(column.rank() >= 1, "GatherTensorRows: a column of rank 0");
    const int64_t n = column.dim(0);
    const size_t row_bytes = n == 0 ? 0 : column.bytes() / static_cast<size_t>(n);
    out[c] = Tensor(column.dtype(), WithLeading(column.dims(), count));
    auto* dst = static_cast<char*>(out[c].raw_mutable_data(column.dtype()));
    // A column of empty rows ([N, 0]) may hold no buffer at all.
    const auto* src = row_bytes > 0 ? static_cast<const char*>(column.raw_data()) : nullptr;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t r = rows[i];
      if (r < 0 || r >= n) ThrowInvalidArgument("GatherTensorRows: row ", r, " outside [0, ", n, ")");
      if (row_bytes > 0) std::memcpy(dst + i * row_bytes, src + r * row_bytes, row_bytes);
    }
  }
  return out;
}

Dataset SliceRows(const Dataset& data, int64_t begin, int64_t end) {
  const int64_t n = data.size();
  if (begin < 0 || begin > end || end > n) {
    ThrowInvalidArgument("SliceRows: range [", begin, ", ", end, ") outside [0, ", n, "]");
  }
  if (data.generate) {
    Dataset out;
    out.features = Tensor(DataType::kFP32, WithLeading(data.features.dims(), end - begin));
    out.features.ReleaseBuffer();  // shape-only: the rows are made on demand
    out.labels = Tensor(DataType::kINT64, {end - begin, 1});
    if (end > begin) {
      std::memcpy(out.labels.mutable_data<int64_t>(), data.labels.data<int64_t>() + begin,
                  static_cast<size_t>(end - begin) * sizeof(int64_t));
    }
    out.generate = [generate = data.generate, begin](int64_t row, float* x) { generate(begin + row, x); };
    return out;
  }
  std::vector<int64_t> rows(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) rows[i - begin] = i;
  return GatherRows(data, rows);
}

Dataset ShuffleDataset(const Dataset& data, uint64_t seed) {
  return GatherRows(data, ShuffledIndices(data.size(), seed));
}

std::pair<Dataset, Dataset> SplitDataset(const Dataset& data, double train_fraction) {
  if (!(train_fraction >= 0.0 && train_fraction <= 1.0)) {
    ThrowInvalidArgument("SplitDataset: train_fraction must be in [0, 1], got ", train_fraction);
  }
  const int64_t n = data.size();
  auto n_train = static_cast<int64_t>(static_cast<double>(n) * train_fraction);
  if (n_train > n) n_train = n;
  return {SliceRows(data, 0, n_train), SliceRows(data, n_train, n)};
}

void CheckBatcherOptions(const BatcherOptions& options, const std::string& what) {
  if (options.batch_size <= 0) ThrowInvalidArgument(what, ": batch_size must be positive, got ", options.batch_size);
}

int64_t NumBatches(int64_t rows, const BatcherOptions& options) {
  const int64_t b = options.batch_size;
  return options.drop_last ? rows / b : (rows + b - 1) / b;
}

std::vector<int64_t> EpochOrder(int64_t rows, const BatcherOptions& options, int64_t epoch) {
  if (epoch < 0) ThrowInvalidArgument("epoch must be >= 0, got ", epoch);
  if (options.shuffle) return ShuffledIndices(rows, Batcher::EpochSeed(options.seed, epoch));
  std::vector<int64_t> order(static_cast<size_t>(rows < 0 ? 0 : rows));
  for (int64_t i = 0; i < rows; ++i) order[i] = i;
  return order;
}

Batcher::Batcher(const Dataset& data, BatcherOptions options) : data_(data), options_(options) {
  CheckDataset(data_, "Batcher");
  CheckBatcherOptions(options_, "Batcher");
  StartEpoch(0);
}

uint64_t Batcher::EpochSeed(uint64_t seed, int64_t epoch) {
  return SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(epoch));
}

void Batcher::StartEpoch(int64_t epoch) {
  if (epoch < 0) ThrowInvalidArgument("Batcher: epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  next_batch_ = 0;
  order_ = EpochOrder(data_.size(), options_, epoch);
}

int64_t Batcher::num_batches() const { return NumBatches(data_.size(), options_); }

bool Batcher::Next(Dataset* batch) {
  if (next_batch_ >= num_batches()) return false;
  const int64_t begin = next_batch_ * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, data_.size());
  ++next_batch_;
  *batch = GatherRows(data_, std::vector<int64_t>(order_.begin() + begin, order_.begin() + end));
  return true;
}

}  // namespace kiln
