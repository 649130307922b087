#include "framework/tensor.h"

#include <cstring>

#include "framework/allocator.h"

namespace kiln {

int64_t Numel(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string DimsToString(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

Allocation::Allocation(size_t bytes) : size_(bytes) { ptr_ = CachingAllocator::Global().Allocate(bytes); }

Allocation::~Allocation() {
  if (owned_) CachingAllocator::Global().Free(ptr_, size_);
}

void* Tensor::raw_mutable_data() {
  KILN_CHECK(numel() >= 0, "negative dims ", DimsToString(dims_));
  size_t need = bytes();
  if (alloc_ == nullptr || alloc_->size() < need) alloc_ = std::make_shared<Allocation>(need);
  return alloc_->ptr();
}

void Tensor::CopyFrom(const Tensor& src) {
  dtype_ = src.dtype_;
  dims_ = src.dims_;
  if (src.shape_only()) {
    ReleaseBuffer();
    return;
  }
  shape_only_ = false;
  alloc_ = std::make_shared<Allocation>(bytes());
  if (src.raw_data() != nullptr && bytes() > 0) std::memcpy(alloc_->ptr(), src.raw_data(), bytes());
}

std::string Tensor::ShapeString() const { return std::string(DataTypeName(dtype_)) + DimsToString(dims_); }

void Tensor::CheckReadable(DataType want) const {
  if (dtype_ != want) {
    ThrowInvalidArgument("tensor ", ShapeString(), ": expected dtype ", DataTypeName(want), ", got ",
                         DataTypeName(dtype_));
  }
  if (shape_only()) {
    ThrowInvalidArgument("tensor ", ShapeString(), " is shape-only (its buffer was released): its data cannot be read");
  }
  if (!initialized()) ThrowInvalidArgument("tensor ", ShapeString(), " is read before it holds data");
}

}  // namespace kiln
