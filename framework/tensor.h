// Tensor: dims, dtype and a 64-byte-aligned buffer that several tensors may
// share (in-place execution, zero-copy binding). Row-major, dense.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/data_type.h"
#include "framework/error.h"

namespace kiln {

using Dims = std::vector<int64_t>;

// Product of dims (1 for a scalar / empty dims).
int64_t Numel(const Dims& dims);
// "[64,784]"
std::string DimsToString(const Dims& dims);

// One aligned allocation. Owned through shared_ptr by every tensor using it.
// Owned buffers come from CachingAllocator::Global() (framework/allocator.h).
class Allocation {
 public:
  static constexpr size_t kAlignment = 64;
  explicit Allocation(size_t bytes);
  // A non-owning view of memory someone else keeps alive (zero-copy binding).
  Allocation(void* external, size_t bytes) : ptr_(external), size_(bytes), owned_(false) {}
  // A view of memory that `keeper` keeps alive for as long as this
  // allocation exists (a numpy array fed from Python: the keeper holds a
  // reference to it and drops it when the last tensor lets go).
  Allocation(void* external, size_t bytes, std::shared_ptr<const void> keeper)
      : ptr_(external), size_(bytes), owned_(false), keeper_(std::move(keeper)) {}
  ~Allocation();
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  void* ptr() const { return ptr_; }
  size_t size() const { return size_; }
  // False for a view of memory someone else owns (ShareExternalData).
  bool owned() const { return owned_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
  bool owned_ = true;
  std::shared_ptr<const void> keeper_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DataType dtype, Dims dims) : dtype_(dtype), dims_(std::move(dims)) {}

  const Dims& dims() const { return dims_; }
  int64_t dim(size_t i) const { return dims_[i]; }
  size_t rank() const { return dims_.size(); }
  int64_t numel() const { return Numel(dims_); }
  DataType dtype() const { return dtype_; }
  size_t bytes() const { return static_cast<size_t>(numel()) * SizeOf(dtype_); }

  // Sets dims (keeps the buffer; mutable_data reallocates when it is too small).
  void Resize(Dims dims) { dims_ = std::move(dims); }
  void set_dtype(DataType dtype) { dtype_ = dtype; }

  // True when a buffer holding at least bytes() is attached.
  bool initialized() const { return alloc_ != nullptr && alloc_->size() >= bytes(); }

  // Returns the buffer, allocating (uninitialised) when none is attached or the
  // attached one is smaller than dims * sizeof(dtype). Sets dtype to T's.
  template <typename T>
  T* mutable_data() {
    dtype_ = DataTypeOf<T>::value;
    return static_cast<T*>(raw_mutable_data());
  }
  void* raw_mutable_data(DataType dtype) {
    dtype_ = dtype;
    return raw_mutable_data();
  }
  void* raw_mutable_data();

  // Checked typed read access: throws when the dtype differs or no buffer is set.
  template <typename T>
  const T* data() const {
    CheckReadable(DataTypeOf<T>::value);
    return static_cast<const T*>(raw_data());
  }
  template <typename T>
  T* data() {
    CheckReadable(DataTypeOf<T>::value);
    return static_cast<T*>(raw_data());
  }
  const void* raw_data() const { return alloc_ ? alloc_->ptr() : nullptr; }
  void* raw_data() { return alloc_ ? alloc_->ptr() : nullptr; }

  // Buffer sharing: after ShareBufferWith(other) both tensors see one buffer.
  void ShareBufferWith(const Tensor& other) { alloc_ = other.alloc_; }
  bool IsSharedBufferWith(const Tensor& other) const {
    return alloc_ != nullptr && alloc_ == other.alloc_;
  }
  // How many tensors hold this buffer (0 when none).
  long use_count() const { return alloc_ ? alloc_.use_count() : 0; }
  const std::shared_ptr<Allocation>& allocation() const { return alloc_; }

  // Makes this tensor a non-owning view of `data` (which must outlive it). A
  // null `data` makes it shape-only (see ReleaseBuffer).
  void ShareExternalData(void* data, DataType dtype, Dims dims) {
    dtype_ = dtype;
    dims_ = std::move(dims);
    if (data == nullptr) {
      ReleaseBuffer();
      return;
    }
    alloc_ = std::make_shared<Allocation>(data, bytes());
    shape_only_ = false;
  }

  // Makes this tensor use `alloc` (which must hold at least bytes() for
  // `dims`): a buffer made elsewhere, such as a kept-alive external view.
  void ShareAllocation(std::shared_ptr<Allocation> alloc, DataType dtype, Dims dims) {
    dtype_ = dtype;
    dims_ = std::move(dims);
    KILN_CHECK(alloc != nullptr && alloc->size() >= bytes(), "ShareAllocation: buffer smaller than ",
               DimsToString(dims_));
    alloc_ = std::move(alloc);
    shape_only_ = false;
  }

  // Drops the buffer; dims and dtype stay, but the tensor no longer counts as
  // holding a value.
  void Clear() {
    alloc_.reset();
    shape_only_ = false;
  }

  // Drops the buffer and keeps the tensor as a shape-only value: ops that read
  // only its dims and dtype (no-need-buffer inputs, OpInfo::no_need_buffer)
  // may still take it; reading its data fails. The executor leaves this once
  // every remaining reader of a var reads only its shape.
  void ReleaseBuffer() {
    alloc_.reset();
    shape_only_ = true;
  }
  // True for a tensor left by ReleaseBuffer (until a buffer is attached again).
  bool shape_only() const { return alloc_ == nullptr && shape_only_; }
  // Holds data, or is shape-only: its dims and dtype are meaningful.
  bool has_shape() const { return initialized() || shape_only(); }

  // Deep copy of dims, dtype and data into a fresh buffer.
  void CopyFrom(const Tensor& src);

  // "f32[64,10]"
  std::string ShapeString() const;

 private:
  void CheckReadable(DataType want) const;

  DataType dtype_ = DataType::kFP32;
  Dims dims_;
  std::shared_ptr<Allocation> alloc_;
  bool shape_only_ = false;
};

}  // namespace kiln
